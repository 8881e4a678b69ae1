"""The one line every hypothesis of a sentence is printed on, `text<TAB>score` per beam, best
first: the decoder's `return_beams` output and the query client's `beams` output are the same."""


def beams_line(beams):
    """`[(text, score), ...]` -> `text<TAB>score<TAB>text<TAB>score...`, scores to 4 decimals."""
    return "\t".join(f"{text}\t{score:.4f}" for text, score in beams)
