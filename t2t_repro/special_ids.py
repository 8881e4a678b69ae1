"""Ids every vocabulary reserves: padding (also the decoder's start symbol) and end of sequence."""

PAD_ID = 0
EOS_ID = 1
