"""--decode_precision, shared by the decoder and the exporter's SavedModel, so defined once
here."""

from absl import flags

from t2t_repro.decoding.precision import PRECISIONS

flags.DEFINE_enum("decode_precision", "float32", PRECISIONS,
                  "Decode (and score) with a copy of the weights in this precision: bfloat16 "
                  "holds weights and runs matmuls in bfloat16 (pays on CPUs with bfloat16 "
                  "instructions, is slower without them); int8 gives the dense layers int8 "
                  "weights (decoder only).")
