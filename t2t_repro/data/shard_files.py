"""The names of a split's TFRecord shard files, importable without TensorFlow: the trainer
checks that they exist before it starts, under either Keras backend."""


def shard_paths(prefix, num_shards):
    """`prefix-00000-of-00004.tfrecord`, ... for `num_shards` shards."""
    return [f"{prefix}-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]
