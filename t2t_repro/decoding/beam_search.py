"""Batched beam search with GNMT's length penalty, as the paper decodes (§6.1, §6.3).

A hypothesis scores log P(y | x) / lp(|y|) with lp(n) = ((5 + n) / 6)^α (Wu et al. 2016, §7),
P renormalised at each step over the tokens that may be output (never id 0; never EOS under
`force_max_length`).
Each step expands every live hypothesis by every token, keeps the 2·beam best continuations,
sends those ending in EOS (or reaching their sentence's maximum length) to the finished set and
the best `beam` others on. A sentence stops early once its worst kept finished hypothesis
scores at least as well as the best live one could at its maximum length; log-probabilities
only fall and, for α ≥ 0, lp only rises, so nothing live can still enter the top `beam`.

The search is independent of the model: a step function maps the live sequences to next-token
logits and carries a per-hypothesis state (the attention cache), which the search reorders as
hypotheses are kept or dropped.

Two drivers run the same step: the graph loop (`keras.ops.while_loop`: one compiled program for
the whole search, no host round trip, exportable) and the host loop (a Python loop over the
compiled step that checks `done` on the host after every position; kept as the reference the
graph loop is tested and benchmarked against, and for step functions whose shapes change every
step).
"""

import dataclasses
import functools

import keras
import numpy as np
from keras import ops

from t2t_repro.decoding.compiled import compile_for_backend
from t2t_repro.names import EOS_ID, PAD_ID

# Finite, so that sums and ratios of "impossible" scores never produce NaN.
NEG_INF = -1e9


def reorder_rows(state, parent_beams):
    """Beam search's default state reordering: every tensor's rows [batch·beam, ...] taken
    from hypothesis `parent_beams` [batch, beam] of the same sentence."""
    batch_size, beam = ops.shape(parent_beams)[0], ops.shape(parent_beams)[1]
    rows = ops.reshape(parent_beams + ops.expand_dims(ops.arange(batch_size) * beam, 1), (-1,))
    return keras.tree.map_structure(lambda tensor: ops.take(tensor, rows, axis=0), state)


def length_penalty(length, alpha):
    """GNMT's ((5 + length) / 6)^α."""
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


LOOPS = ("graph", "host")


@dataclasses.dataclass
class BeamSearchOutput:
    """`ids` [batch, beam, length]: each sentence's finished hypotheses, best first, EOS
    included (unless cut at the maximum length) and 0-padded; `scores` [batch, beam]:
    log P / length penalty; `steps`: the positions decoded (fewer than the longest maximum
    length when every sentence stopped early)."""

    ids: np.ndarray
    scores: np.ndarray
    steps: int = None

    def best(self):
        """[batch, length]: the best hypothesis of each sentence."""
        return self.ids[:, 0]


class BeamSearch:
    """Beam search over a step function, compiled once and reused for every batch.

    Args:
        step_fn: `(sequences, position, state, constants) -> (logits, state)`. `sequences`
            [batch·beam, max_length + 1] holds a start id 0 then the tokens chosen so far, so
            `sequences[:, position]` is the decoder input at `position`; `logits` [batch·beam,
            vocab] predict the token at `position`. `state` is a nested structure of tensors
            the search reorders as it keeps hypotheses (`reorder_state`); `constants` are left
            alone.
        beam_size: hypotheses kept per sentence; 1 is greedy search.
        alpha: length-penalty exponent α ≥ 0 (0: plain log-probability).
        eos_id: the end-of-sentence id.
        force_max_length: never end a hypothesis with EOS, so every sentence decodes exactly
            its maximum length (for benchmarks that need a fixed amount of work).
        variables, jit_compile, fixed_shapes: how to compile the step or the loop
            (`compile_for_backend`).
        loop: "graph" runs every position inside one compiled `while_loop`; "host" calls the
            compiled step once per position from Python (the reference; needed when the
            step's shapes change from one position to the next).
        reorder_state: `(state, parent_beams [batch, beam]) -> state`, the state once
            hypothesis i of each sentence continues its hypothesis `parent_beams[b, i]`.
            Default `reorder_rows`: a state of tensors with batch·beam rows, copied.
    """

    def __init__(self, step_fn, beam_size, alpha, eos_id=EOS_ID, force_max_length=False,
                 variables=(), jit_compile=False, fixed_shapes=True, loop="host",
                 reorder_state=reorder_rows):
        if beam_size < 1:
            raise ValueError(f"beam_size must be at least 1, got {beam_size}.")
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0 (the early stop relies on it), got {alpha}.")
        if loop not in LOOPS:
            raise ValueError(f"loop must be one of {LOOPS}, got {loop!r}.")
        self.beam_size = beam_size
        self.alpha = alpha
        self.eos_id = eos_id
        self.force_max_length = force_max_length
        self.loop = loop
        self.step_fn = step_fn
        self.reorder_state = reorder_state
        if loop == "host":
            self._step = compile_for_backend(
                functools.partial(self._search_step, step_fn), variables, jit_compile,
                fixed_shapes,
            )
        else:
            self._loop = compile_for_backend(self.search_loop, variables, jit_compile,
                                             fixed_shapes)

    def __call__(self, state, constants, max_lengths, sequence_length=None):
        """Decodes a batch and returns a BeamSearchOutput.

        Args:
            state, constants: the step function's, `state` with batch·beam rows.
            max_lengths: [batch], each sentence's maximum output length (>= 1).
            sequence_length: room for output tokens (default: the longest maximum); a caller
                may round it up so that fewer distinct shapes get compiled.
        """
        max_lengths = np.asarray(max_lengths, dtype=np.int32)
        if max_lengths.min() < 1:
            raise ValueError(f"every maximum output length must be >= 1, got {max_lengths}.")
        batch_size, length = len(max_lengths), int(max_lengths.max())
        search = self.initial_search(batch_size, max(length, sequence_length or 0))
        constants = {"model": constants, "max_lengths": ops.convert_to_tensor(max_lengths)}
        if self.loop == "graph":
            search, steps = self._loop(search, state, constants)
            steps = int(ops.convert_to_numpy(steps))
        else:
            search, steps = self._host_loop(search, state, constants, length)
        ids = ops.convert_to_numpy(search["finished_seq"])[:, :, 1:]
        written = np.flatnonzero((ids != 0).any(axis=(0, 1)))
        used = written[-1] + 1 if written.size else 1
        return BeamSearchOutput(ids[:, :, :used], ops.convert_to_numpy(search["finished_scores"]),
                                steps)

    def _host_loop(self, search, state, constants, length):
        steps = 0
        for position in range(length):
            search, state = self._step(
                search, state, constants, ops.convert_to_tensor(position, "int32")
            )
            steps += 1
            if ops.convert_to_numpy(ops.all(search["done"])):
                break
        return search, steps

    def search_loop(self, search, state, constants):
        """The whole search as one `while_loop` of `_search_step`, until every sentence is
        done: `(search, steps)`. Runs inside whatever program its caller compiles (the
        exporter traces it into a SavedModel)."""

        def unfinished(position, search, state):
            return ops.logical_not(ops.all(search["done"]))

        def step(position, search, state):
            search, state = self._search_step(self.step_fn, search, state, constants, position)
            return position + 1, search, state

        # Every sentence is done by its maximum length, so the loop ends by then.
        steps, search, _ = ops.while_loop(
            unfinished, step, (ops.convert_to_tensor(0, "int32"), search, state)
        )
        return search, steps

    def graph_search(self, state, constants, max_lengths, sequence_length):
        """Tensors in, tensors out, no host work, for a caller's compiled program:
        `(ids [batch, beam, sequence_length], scores [batch, beam])`, ids 0-padded.
        `max_lengths` [batch] int32 (each >= 1, at most `sequence_length`), may be symbolic."""
        search = self.initial_search(ops.shape(max_lengths)[0], sequence_length)
        search, _ = self.search_loop(search, state, {"model": constants,
                                                     "max_lengths": max_lengths})
        return search["finished_seq"][:, :, 1:], search["finished_scores"]

    def initial_search(self, batch_size, length):
        """The search's starting tensors for `length` output positions (sizes may be
        symbolic)."""
        beam = self.beam_size
        # All beams start as the same empty hypothesis; only the first may expand at first.
        first_only = ops.where(ops.arange(beam) == 0, 0.0, NEG_INF)
        return {
            "alive_seq": ops.zeros((batch_size, beam, length + 1), "int32"),
            "alive_log_probs": ops.zeros((batch_size, beam), "float32") + first_only,
            "finished_seq": ops.zeros((batch_size, beam, length + 1), "int32"),
            "finished_scores": ops.full((batch_size, beam), NEG_INF, "float32"),
            "done": ops.zeros((batch_size,), "bool"),
        }

    def _search_step(self, step_fn, search, state, constants, position):
        """Chooses every hypothesis's token at `position`; one compiled program."""
        beam = self.beam_size
        alive_seq = search["alive_seq"]
        batch_size, sequence_width = ops.shape(alive_seq)[0], ops.shape(alive_seq)[2]
        logits, state = step_fn(
            ops.reshape(alive_seq, (batch_size * beam, sequence_width)), position, state,
            constants["model"],
        )
        vocab_size = ops.shape(logits)[-1]
        # Id 0 is padding (and the start symbol), never an output token. Excluded before the
        # softmax, so that scores are log-probabilities over the tokens that can be chosen.
        never = ops.arange(vocab_size) == PAD_ID
        if self.force_max_length:
            never = ops.logical_or(never, ops.arange(vocab_size) == self.eos_id)
        logits = ops.where(never, NEG_INF, ops.cast(logits, "float32"))

        # The 2·beam best continuations: at most `beam` of them end in EOS, so at least
        # `beam` stay alive. Beam 1 is greedy search: the argmax alone continues or ends.
        # They are among each hypothesis's own 2·beam best tokens, so the vocabulary-wide
        # work is one top-k and one log-sum-exp per hypothesis; log-probabilities are
        # computed for those few tokens only, never for the whole vocabulary.
        width = 2 * beam if beam > 1 else 1
        per_hypothesis = min(width, vocab_size)  # a tiny vocabulary may have fewer tokens
        best_logits, best_ids = ops.top_k(logits, per_hypothesis)
        best_log_probs = best_logits - ops.logsumexp(logits, axis=-1, keepdims=True)
        candidates = ops.expand_dims(search["alive_log_probs"], 2) + ops.reshape(
            best_log_probs, (batch_size, beam, per_hypothesis))
        top_log_probs, top_indices = ops.top_k(ops.reshape(candidates, (batch_size, -1)), width)
        top_beams = top_indices // per_hypothesis
        top_ids = ops.take_along_axis(
            ops.reshape(ops.cast(best_ids, "int32"), (batch_size, beam * per_hypothesis)),
            top_indices, axis=1)
        top_seq = ops.take_along_axis(alive_seq, ops.expand_dims(top_beams, 2), axis=1)
        written = ops.arange(sequence_width) == position + 1
        top_seq = ops.where(written, ops.expand_dims(top_ids, 2), top_seq)

        length = position + 1
        max_lengths = constants["max_lengths"]
        ends = ops.logical_or(
            top_ids == self.eos_id, ops.expand_dims(length >= max_lengths, 1)
        )

        alive_log_probs, keep = ops.top_k(ops.where(ends, NEG_INF, top_log_probs), beam)
        alive_seq = ops.take_along_axis(top_seq, ops.expand_dims(keep, 2), axis=1)
        state = self.reorder_state(state, ops.take_along_axis(top_beams, keep, axis=1))

        # A sentence already done takes no new finished hypotheses.
        newly_finished = ops.logical_and(ends, ops.expand_dims(~search["done"], 1))
        new_scores = ops.where(
            newly_finished, top_log_probs / length_penalty(length, self.alpha), NEG_INF
        )
        finished_scores, keep = ops.top_k(
            ops.concatenate([search["finished_scores"], new_scores], axis=1), beam
        )
        finished_seq = ops.take_along_axis(
            ops.concatenate([search["finished_seq"], top_seq], axis=1),
            ops.expand_dims(keep, 2),
            axis=1,
        )

        best_reachable = alive_log_probs[:, 0] / length_penalty(max_lengths, self.alpha)
        done = search["done"] | (length >= max_lengths) | (finished_scores[:, -1] >= best_reachable)
        search = {
            "alive_seq": alive_seq,
            "alive_log_probs": alive_log_probs,
            "finished_seq": finished_seq,
            "finished_scores": finished_scores,
            "done": done,
        }
        return search, state

