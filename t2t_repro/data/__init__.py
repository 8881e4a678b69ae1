"""Problems' data: the Problem base class, text encoders and the tf.data input pipeline."""
