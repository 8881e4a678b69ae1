"""Registered problems; importing this package registers them all."""

from problems import (
    algorithmic,
    parsing_wsj,
    translate_ende,
    translate_ende_multi30k,
    translate_enfr,
    translate_text_files,
)
