"""Beam search (greedy search, sampling) with a Transformer: the cached incremental decoder, or
for comparison the uncached one that recomputes the whole prefix at every step."""

import keras
import numpy as np
from keras import ops

from t2t_repro.decoding.beam_search import BeamSearch, reorder_rows
from t2t_repro.layers.row_gathers import take_rows_of_each
from t2t_repro.names import PAD_ID

# Sources and caches are padded to a multiple of this many positions, so that a file of
# sentences of many lengths compiles a handful of shapes rather than one per batch.
SHAPE_MULTIPLE = 16

# Decoder kernels are laid out for batches of at least this many hypotheses (sentences ×
# beam): at 32 rows the laid-out product is 1.9x faster on an AVX2 EPYC, at 4 rows slower.
LAID_OUT_KERNELS_MIN_ROWS = 32


def padded_length(length, limit=None):
    """`length` rounded up to a multiple of SHAPE_MULTIPLE, but not past `limit` (>= length; a
    learned position table's size, which padding must not outgrow): the size sources and
    caches get. `length` may be a scalar tensor (in a traced program)."""
    padded = (length + SHAPE_MULTIPLE - 1) // SHAPE_MULTIPLE * SHAPE_MULTIPLE
    if limit is None:
        return padded
    return min(padded, limit) if isinstance(padded, int) else ops.minimum(padded, limit)


class TransformerBeamSearch:
    """Decodes batches of source ids [batch, source_length] (0-padded) with `model`.

    Args:
        model: a built `Transformer`.
        beam_size, alpha: the beam width (1: greedy) and the length-penalty exponent.
        extra_length: a sentence's output is at most its source length + this many tokens,
            and with a learned-position model at most `hparams.max_length` tokens (the rows of
            its position table; `max_lengths(inputs)` shows each sentence's cap). A source
            longer than that table is an error naming max_length.
        use_cache: the incremental decoder (keys and values cached, one position per step);
            False recomputes the whole prefix every step (slow; for checks and benchmarks).
        force_max_length: ignore EOS and decode every sentence to its maximum length.
        jit_compile: compile with XLA under TensorFlow, not only as a graph (cached decoder
            only; the uncached one changes shape every step). JAX always jit-compiles the
            cached decoder.
        loop: "graph" (the whole search is one compiled `while_loop`) or "host" (a Python
            loop over the compiled step; see `BeamSearch`). The uncached decoder always runs
            on the host loop: its shapes change every step.
        sampler: a `sampling.Sampler` (beam_size 1): draw each token instead of the argmax.
        seed: with a sampler, seeds the draws (None: a random seed), so that a search made
            with the same seed and given the same batches samples the same outputs.
        drop_done: let the graph loop go on with the sentences not yet done only, each time
            a quarter of a batch's are (`BeamSearch`'s `select_sentences`; TensorFlow graphs
            only). The outputs are the same either way.
    """

    def __init__(self, model, beam_size=4, alpha=0.6, extra_length=50, use_cache=True,
                 force_max_length=False, jit_compile=False, loop="graph", sampler=None,
                 seed=None, drop_done=True):
        self.model = model
        self.beam_size = beam_size
        self.extra_length = extra_length
        self.use_cache = use_cache
        self.jit_compile = jit_compile and use_cache
        if use_cache:
            step_fn, reorder_state = self._cached_step, model.reorder_decode_cache
        else:
            step_fn, reorder_state = self._full_prefix_step, reorder_rows
        self.search = BeamSearch(
            step_fn, beam_size, alpha, force_max_length=force_max_length,
            variables=model.variables, jit_compile=self.jit_compile,
            fixed_shapes=use_cache, loop=loop if use_cache else "host",
            reorder_state=reorder_state, sampler=sampler,
            select_sentences=self._select_sentences if use_cache and drop_done else None,
        )
        # Draws each batch's seed pair on the host, outside the compiled search.
        self._seeds = keras.random.SeedGenerator(seed) if sampler is not None else None

    def max_lengths(self, inputs):
        """Each sentence's maximum output length: its source length (EOS included) plus
        `extra_length`, capped at `hparams.max_length` for a learned-position model, which has
        no position beyond its table to decode at."""
        source_lengths = np.count_nonzero(np.asarray(inputs) != PAD_ID, axis=1)
        return ops.convert_to_numpy(self._output_limits(source_lengths)).astype(np.int32)

    def _output_limits(self, source_lengths):
        """`max_lengths` of the source lengths (an array, or a tensor in a traced program)."""
        lengths = source_lengths + self.extra_length
        if self.model.max_positions is not None:
            lengths = ops.minimum(lengths, self.model.max_positions)
        return ops.maximum(lengths, 1)

    def __call__(self, inputs, max_lengths=None, target_prefix=None):
        """Decodes `inputs` [batch, source_length]; `max_lengths` [batch] overrides
        `self.max_lengths(inputs)`; `target_prefix` [batch, prefix_length] (0-padded target
        ids, no EOS): each output begins with its row's tokens, and the search continues from
        there. Returns a BeamSearchOutput (ids [batch, beam, length]).

        Raises a ValueError naming hparam max_length, before any computation, when a source or
        a `max_lengths` entry exceeds a learned-position model's table.
        """
        inputs = np.asarray(inputs, dtype=np.int32)
        # Columns of padding after the longest source carry nothing; dropping them keeps the
        # padded width within a learned position table.
        non_pad_columns = np.flatnonzero((inputs != PAD_ID).any(axis=0))
        inputs = inputs[:, : non_pad_columns[-1] + 1 if non_pad_columns.size else 1]
        self.model.check_length(inputs.shape[1], "source")
        max_lengths = self.max_lengths(inputs) if max_lengths is None else max_lengths
        self.model.check_length(int(np.max(max_lengths)), "output length requested")
        limit = self.model.max_positions
        inputs = np.pad(inputs, ((0, 0), (0, padded_length(inputs.shape[1], limit)
                                          - inputs.shape[1])))
        memory, memory_mask = self.model.encode(ops.convert_to_tensor(inputs), training=False)
        sequence_length = padded_length(int(np.max(max_lengths)), limit)
        state, constants = self._search_inputs(memory, memory_mask, sequence_length)
        seed = None
        if self._seeds is not None:
            # Below 2^30, so that adding a position stays within int32.
            seed = np.asarray(ops.convert_to_numpy(self._seeds.next())).astype(np.int64) % 2**30
        return self.search(state, constants, max_lengths, sequence_length,
                           target_prefix=target_prefix, seed=seed)

    def graph_decode(self, inputs):
        """`inputs` [batch, source_length] int32 (0-padded; sizes may be symbolic) ->
        `(ids [batch, beam, length], scores [batch, beam])`, all in tensor ops with the same
        padding and maximum lengths as `__call__`, for tracing into a compiled program such as
        an exported SavedModel. The caller keeps sources within `model.max_positions`.
        Beam search and greedy search only (no sampler)."""
        if self.search.sampler is not None:
            raise ValueError("graph_decode has no sampling; decode with sampling_method=argmax.")
        limit = self.model.max_positions
        lengths = ops.sum(ops.cast(inputs != PAD_ID, "int32"), axis=1)
        width = ops.max(ops.concatenate([lengths, ops.ones((1,), "int32")]))
        inputs = inputs[:, :width]
        inputs = ops.pad(inputs, ((0, 0), (0, padded_length(width, limit) - width)))
        max_lengths = self._output_limits(lengths)
        memory, memory_mask = self.model.encode(inputs, training=False)
        sequence_length = padded_length(ops.max(max_lengths), limit)
        state, constants = self._search_inputs(memory, memory_mask, sequence_length)
        return self.search.graph_search(state, constants, max_lengths, sequence_length)

    def _search_inputs(self, memory, memory_mask, sequence_length):
        """The step function's `(state, constants)` for the encoded batch, per beam."""
        if self.use_cache:
            state = self.model.empty_decode_cache(ops.shape(memory)[0], sequence_length,
                                                  self.beam_size, memory.dtype)
            # Projected once per sentence and read at every step by all its beams; the output
            # projection and the decoder's kernels laid out once per batch, except for XLA,
            # which lays out operands itself and runs slower given this layout, and the
            # kernels for fewer than LAID_OUT_KERNELS_MIN_ROWS hypotheses or a batch of
            # unknown size (docs/performance.md).
            projection = kernels = None
            if not self.jit_compile:
                projection = self.model.decoding_projection()
                rows = ops.shape(memory)[0]
                if isinstance(rows, int) and rows * self.beam_size >= LAID_OUT_KERNELS_MIN_ROWS:
                    kernels = self.model.decoding_kernels()
            return state, (self.model.memory_key_values(memory), memory_mask, projection,
                           kernels)
        return (), self._per_beam((memory, memory_mask))

    @staticmethod
    def _select_sentences(cache, constants, rows):
        """The cache and the step's constants of the sentences `rows` alone: every tensor
        but the output projection and the laid-out kernels, which all sentences share, has a
        row per sentence."""
        memory_key_values, memory_mask, *shared_weights = constants
        cache, memory_key_values, memory_mask = take_rows_of_each(
            (cache, memory_key_values, memory_mask), rows)
        return cache, (memory_key_values, memory_mask, *shared_weights)

    def _per_beam(self, tensors):
        """Each sentence's rows repeated beam_size times, as the search's rows are laid out."""
        return keras.tree.map_structure(
            lambda tensor: ops.repeat(tensor, self.beam_size, axis=0), tensors
        )

    def _cached_step(self, sequences, position, cache, constants):
        memory_key_values, memory_mask, output_projection, layer_kernels = constants
        ids = ops.reshape(sequences[:, position], (-1, self.beam_size))
        logits, cache = self.model.decode_step(ids, position, cache, memory_key_values,
                                               memory_mask, output_projection, layer_kernels)
        return ops.reshape(logits, (-1, ops.shape(logits)[-1])), cache

    def _full_prefix_step(self, sequences, position, state, constants):
        memory, memory_mask = constants
        logits = self.model.decode(sequences[:, : position + 1], memory, memory_mask,
                                   training=False)
        return logits[:, -1], state
