"""Batched beam search with GNMT's length penalty, as the paper decodes (§6.1, §6.3).

A hypothesis scores log P(y | x) / lp(|y|) with lp(n) = ((5 + n) / 6)^α (Wu et al. 2016, §7),
P renormalised at each step over the tokens that may be output (never id 0; never EOS under
`force_max_length`).
Each step expands every live hypothesis by every token, keeps the 2·beam best continuations,
sends those ending in EOS to the finished set and the best `beam` others on. A sentence stops
early once its worst kept finished hypothesis scores at least as well as the best live one
could at its maximum length; log-probabilities only fall and, for α ≥ 0, lp only rises, so
nothing live can still enter the top `beam`. The live hypotheses a sentence has when it reaches
its maximum length are cut there, without EOS, and returned only where it finished fewer than
`beam` (as tensor2tensor falls back on them for a sentence with none): a long looping
hypothesis, whose lp is large, never outranks a finished one.

Beam 1 is greedy search, or with a `Sampler` random sampling. A target prefix forces each
sentence's first tokens; their log-probabilities count in the scores as any other token's.

The search is independent of the model: a step function maps the live sequences to next-token
logits and carries a per-hypothesis state (the attention cache), which the search reorders as
hypotheses are kept or dropped.

Two drivers run the same step: the graph loop (`keras.ops.while_loop`: one compiled program for
the whole search, no host round trip between steps, exportable) and the host loop (a Python
loop over the compiled step that checks `done` on the host after every position; kept as the
reference the graph loop is tested and benchmarked against, and for step functions whose
shapes change every step).

A sentence that is done still costs its rows every step until the batch is done. Given a
`select_sentences` function, the graph loop in a TensorFlow graph therefore returns to the
host each time a quarter of its sentences are done, sets their results aside and goes on with
the rest only (`_compacting_loop`): a new row count costs one more trace there (which then serves
every count), where XLA and JAX would compile again for each.
"""

import dataclasses
import functools

import keras
import numpy as np
from keras import ops

from t2t_repro.decoding.compiled import compile_for_backend
from t2t_repro.decoding.sampling import step_seed
from t2t_repro.decoding.logit_reductions import log_normaliser, top_k
from t2t_repro.layers.row_gathers import flat_rows, take_rows, take_rows_of_each
from t2t_repro.names import EOS_ID, PAD_ID

# Finite, so that sums and ratios of "impossible" scores never produce NaN.
NEG_INF = -1e9

# The graph loop drops done sentences from batches of at least MIN_ROWS_TO_COMPACT sentences
# (a step of fewer costs about as much), each time 1 / DROP_FRACTION of them are done
# (`_compacting_loop`; measured in docs/performance.md, "Done sentences dropped").
MIN_ROWS_TO_COMPACT = 8
DROP_FRACTION = 4


def reorder_rows(state, parent_beams):
    """Beam search's default state reordering: every tensor's rows [batch·beam, ...] taken
    from hypothesis `parent_beams` [batch, beam] of the same sentence."""
    return take_rows_of_each(state, flat_rows(parent_beams, ops.shape(parent_beams)[1]))


def length_penalty(length, alpha):
    """GNMT's ((5 + length) / 6)^α."""
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


LOOPS = ("graph", "host")


@dataclasses.dataclass
class BeamSearchOutput:
    """`ids` [batch, beam, length]: each sentence's finished hypotheses, best first, EOS
    included and 0-padded, then if it finished fewer than `beam` its best hypotheses cut at
    the maximum length (no EOS), best first; `scores` [batch, beam]:
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
        beam_size: hypotheses kept per sentence; 1 is greedy search (or sampling).
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
        sampler: a `sampling.Sampler` to draw each token at random instead of taking the most
            probable (beam_size 1 only); each call then takes a `seed`.
        select_sentences: `(state, constants, rows) -> (state, constants)`, the step's
            state and constants of the sentences `rows` ([n] int32, in that order) alone; lets
            the graph loop drop done sentences (above). Not used by a sampling search, whose
            draws depend on the batch's rows.
    """

    def __init__(self, step_fn, beam_size, alpha, eos_id=EOS_ID, force_max_length=False,
                 variables=(), jit_compile=False, fixed_shapes=True, loop="host",
                 reorder_state=reorder_rows, sampler=None, select_sentences=None):
        if beam_size < 1:
            raise ValueError(f"beam_size must be at least 1, got {beam_size}.")
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0 (the early stop relies on it), got {alpha}.")
        if loop not in LOOPS:
            raise ValueError(f"loop must be one of {LOOPS}, got {loop!r}.")
        if sampler is not None and beam_size != 1:
            raise ValueError(f"sampling needs beam_size 1, got {beam_size}.")
        self.sampler = sampler
        self.beam_size = beam_size
        self.alpha = alpha
        self.eos_id = eos_id
        self.force_max_length = force_max_length
        self.loop = loop
        self.step_fn = step_fn
        self.reorder_state = reorder_state
        compacts = (loop == "graph" and sampler is None and not jit_compile
                    and keras.backend.backend() == "tensorflow")
        self.select_sentences = select_sentences if compacts else None
        if loop == "host":
            self._step = compile_for_backend(
                functools.partial(self._search_step, step_fn), variables, jit_compile,
                fixed_shapes,
            )
        else:
            self._loop = compile_for_backend(self.search_loop, variables, jit_compile,
                                             fixed_shapes)

    def __call__(self, state, constants, max_lengths, sequence_length=None, target_prefix=None,
                 seed=None):
        """Decodes a batch and returns a BeamSearchOutput.

        Args:
            state, constants: the step function's, `state` with batch·beam rows.
            max_lengths: [batch], each sentence's maximum output length (>= 1).
            sequence_length: room for output tokens (default: the longest maximum); a caller
                may round it up so that fewer distinct shapes get compiled.
            target_prefix: optional [batch, prefix_length] ids, 0-padded: each sentence's
                output begins with its row's tokens (no EOS among them; at most its maximum
                length of them), then the search goes on from there.
            seed: with a sampler, two int32 (the draws are a function of them).
        """
        max_lengths = np.asarray(max_lengths, dtype=np.int32)
        if max_lengths.min() < 1:
            raise ValueError(f"every maximum output length must be >= 1, got {max_lengths}.")
        batch_size, length = len(max_lengths), int(max_lengths.max())
        width = max(length, sequence_length or 0)
        search = self.initial_search(batch_size, width)
        constants = {"model": constants, "max_lengths": ops.convert_to_tensor(max_lengths)}
        if target_prefix is not None:
            constants["target_prefix"] = self._prefix_columns(target_prefix, max_lengths, width)
        if self.sampler is not None:
            if seed is None:
                raise ValueError("a sampling search needs a seed.")
            constants["seed"] = ops.convert_to_tensor(np.asarray(seed, np.int32))
        if self.loop == "host":
            search, steps = self._host_loop(search, state, constants, length)
            ids, scores = (ops.convert_to_numpy(tensor) for tensor in self.results(search))
        elif self.select_sentences is None:
            search, _, steps = self._loop(search, state, constants)
            ids, scores = (ops.convert_to_numpy(tensor) for tensor in self.results(search))
        else:
            ids, scores, steps = self._compacting_loop(search, state, constants)
        steps = int(ops.convert_to_numpy(steps))
        written = np.flatnonzero((ids != 0).any(axis=(0, 1)))
        used = written[-1] + 1 if written.size else 1
        return BeamSearchOutput(ids[:, :, :used], scores, steps)

    def _prefix_columns(self, target_prefix, max_lengths, width):
        """The prefixes as the step reads them: [batch, width + 1] int32, column p the token
        forced at position p (0: none). Raises ValueError for a prefix holding EOS or padding
        inside, or longer than its sentence's maximum length."""
        target_prefix = np.asarray(target_prefix, np.int32).reshape(len(max_lengths), -1)
        lengths = np.count_nonzero(target_prefix, axis=1)
        for row, (ids, count) in enumerate(zip(target_prefix, lengths)):
            if (ids[:count] == 0).any() or (ids == self.eos_id).any():
                raise ValueError(f"target prefix {row} must be tokens other than EOS followed "
                                 f"only by padding, got {ids.tolist()}.")
            if count > max_lengths[row]:
                raise ValueError(f"target prefix {row} has {count} tokens, more than its "
                                 f"maximum output length {max_lengths[row]}.")
        columns = np.zeros((len(max_lengths), width + 1), np.int32)
        columns[:, : target_prefix.shape[1]] = target_prefix[:, : width + 1]
        return ops.convert_to_tensor(columns)

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

    def search_loop(self, search, state, constants, start=0, enough_done=None):
        """The search as one `while_loop` of `_search_step` from position `start` until
        every sentence is done, or until `enough_done` of them are (a scalar; may be symbolic):
        `(search, state, position reached)`. Runs inside whatever program its caller compiles
        (the exporter traces it into a SavedModel)."""

        def unfinished(position, search, state):
            if enough_done is None:
                return ops.logical_not(ops.all(search["done"]))
            return ops.sum(ops.cast(search["done"], "int32")) < enough_done

        def step(position, search, state):
            search, state = self._search_step(self.step_fn, search, state, constants, position)
            return position + 1, search, state

        # Every sentence is done by its maximum length, so the loop ends by then.
        position, search, state = ops.while_loop(
            unfinished, step, (ops.convert_to_tensor(start, "int32"), search, state)
        )
        return search, state, position

    def _compacting_loop(self, search, state, constants):
        """The graph loop, back on the host each time a quarter of the batch's sentences
        are done: their results are set aside and the search goes on with the others' rows only.
        `(ids, scores, steps)` as NumPy arrays, rows in the batch's order."""
        sentences = np.arange(len(search["done"]))  # each row's sentence in the batch
        ids = scores = None
        position = ops.convert_to_tensor(0, "int32")
        while True:
            enough = (len(sentences) // DROP_FRACTION if len(sentences) >= MIN_ROWS_TO_COMPACT
                      else len(sentences))
            search, state, position = self._loop(search, state, constants, position,
                                                 ops.convert_to_tensor(enough, "int32"))
            done = ops.convert_to_numpy(search["done"])
            these_ids, these_scores = (ops.convert_to_numpy(t) for t in self.results(search))
            if ids is None:
                ids = np.zeros((len(done),) + these_ids.shape[1:], these_ids.dtype)
                scores = np.zeros((len(done),) + these_scores.shape[1:], these_scores.dtype)
            ids[sentences[done]], scores[sentences[done]] = these_ids[done], these_scores[done]
            if done.all():
                return ids, scores, position
            rows = ops.convert_to_tensor(np.flatnonzero(~done).astype(np.int32))
            sentences = sentences[~done]
            search = take_rows_of_each(search, rows)
            state, model_constants = self.select_sentences(state, constants["model"], rows)
            constants = {name: (model_constants if name == "model"
                                else take_rows_of_each(tensor, rows))
                         for name, tensor in constants.items()}

    def graph_search(self, state, constants, max_lengths, sequence_length):
        """Tensors in, tensors out, no host work, for a caller's compiled program:
        `(ids [batch, beam, sequence_length], scores [batch, beam])`, ids 0-padded.
        `max_lengths` [batch] int32 (each >= 1, at most `sequence_length`), may be symbolic."""
        search = self.initial_search(ops.shape(max_lengths)[0], sequence_length)
        search, _, _ = self.search_loop(search, state, {"model": constants,
                                                        "max_lengths": max_lengths})
        return self.results(search)

    def results(self, search):
        """`(ids [batch, beam, length], scores [batch, beam])` of a finished search: each
        sentence's finished hypotheses, then in the slots they leave empty its best ones cut
        at the maximum length."""
        beam = self.beam_size
        finished = ops.sum(ops.cast(search["finished_scores"] > NEG_INF / 2, "int32"), axis=1,
                           keepdims=True)
        slots = ops.expand_dims(ops.arange(beam, dtype="int32"), 0)
        taken = ops.where(slots < finished, slots, beam + slots - finished)
        scores = take_rows(
            ops.concatenate([search["finished_scores"], search["cut_scores"]], axis=1), taken)
        ids = take_rows(ops.concatenate([search["finished_seq"], search["cut_seq"]], axis=1),
                        taken)
        return ids[:, :, 1:], scores

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
            "cut_seq": ops.zeros((batch_size, beam, length + 1), "int32"),
            "cut_scores": ops.full((batch_size, beam), NEG_INF, "float32"),
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
        best_log_probs, best_ids = self._choices(logits, constants, position)
        per_hypothesis = ops.shape(best_ids)[-1]
        # The 2·beam best continuations (the argmax or the sample alone for beam 1).
        width = 2 * beam if beam > 1 else 1
        candidates = ops.expand_dims(search["alive_log_probs"], 2) + ops.reshape(
            best_log_probs, (batch_size, beam, per_hypothesis))
        top_log_probs, top_indices = ops.top_k(ops.reshape(candidates, (batch_size, -1)), width)
        top_beams = top_indices // per_hypothesis
        top_ids = take_rows(
            ops.reshape(ops.cast(best_ids, "int32"), (batch_size, beam * per_hypothesis)),
            top_indices)
        top_seq = take_rows(alive_seq, top_beams)
        written = ops.arange(sequence_width) == position + 1
        top_seq = ops.where(written, ops.expand_dims(top_ids, 2), top_seq)

        length = position + 1
        max_lengths = constants["max_lengths"]
        ends = top_ids == self.eos_id
        # Continuations of the start's copies (all but the first beam start impossible) or of
        # tokens a prefix excludes are no hypotheses: they neither finish nor get cut.
        real = top_log_probs > NEG_INF / 2

        alive_log_probs, keep = ops.top_k(ops.where(ends, NEG_INF, top_log_probs), beam)
        alive_seq = take_rows(top_seq, keep)
        state = self.reorder_state(state, take_rows(top_beams, keep))

        # A sentence already done takes no new finished hypotheses.
        newly_finished = ends & real & ops.expand_dims(~search["done"], 1)
        new_scores = ops.where(
            newly_finished, top_log_probs / length_penalty(length, self.alpha), NEG_INF
        )
        finished_scores, keep = ops.top_k(
            ops.concatenate([search["finished_scores"], new_scores], axis=1), beam
        )
        finished_seq = take_rows(ops.concatenate([search["finished_seq"], top_seq], axis=1),
                                 keep)

        # The live hypotheses of a sentence reaching its maximum length are cut there.
        cut_now = ops.expand_dims(~search["done"] & (length == max_lengths), 1)
        cut_scores = ops.where(
            cut_now,
            ops.where(alive_log_probs > NEG_INF / 2,
                      alive_log_probs / length_penalty(length, self.alpha), NEG_INF),
            search["cut_scores"])
        cut_seq = ops.where(ops.expand_dims(cut_now, 2), alive_seq, search["cut_seq"])

        best_reachable = alive_log_probs[:, 0] / length_penalty(max_lengths, self.alpha)
        done = search["done"] | (length >= max_lengths) | (finished_scores[:, -1] >= best_reachable)
        search = {
            "alive_seq": alive_seq,
            "alive_log_probs": alive_log_probs,
            "finished_seq": finished_seq,
            "finished_scores": finished_scores,
            "cut_seq": cut_seq,
            "cut_scores": cut_scores,
            "done": done,
        }
        return search, state

    def _choices(self, logits, constants, position):
        """Each hypothesis's candidate next tokens, `(log_probs, ids)` [batch·beam, k]: its
        2·beam most probable (1 for greedy search), or one drawn by the sampler; the token a
        target prefix forces alone, at its log-probability.

        Log-probabilities are renormalised over the tokens that may be output (never id 0;
        never EOS under `force_max_length`) and computed for the chosen few tokens only,
        never for the whole vocabulary."""
        vocab_size = ops.shape(logits)[-1]
        tokens = ops.arange(vocab_size)
        excluded = tokens == PAD_ID
        if self.force_max_length:
            excluded = ops.logical_or(excluded, tokens == self.eos_id)
        logits = ops.where(excluded, NEG_INF, ops.cast(logits, "float32"))
        unforced = logits
        forcing = "target_prefix" in constants
        if forcing:
            forced = ops.repeat(constants["target_prefix"][:, position], self.beam_size, axis=0)
            forced = ops.expand_dims(forced, 1)
            excluded = ops.logical_or(excluded, (forced != PAD_ID) & (tokens != forced))
            logits = ops.where(excluded, NEG_INF, logits)
        if self.sampler is not None:
            seed = step_seed(constants["seed"], position)
            ids = ops.expand_dims(self.sampler.sample(logits, seed, excluded), 1)
            chosen = take_rows(logits, ids)
        else:
            # At most `beam` of the 2·beam end in EOS, so at least `beam` stay alive. Beam 1
            # is greedy search: the argmax alone continues or ends. A tiny vocabulary may
            # have fewer tokens.
            count = min(2 * self.beam_size if self.beam_size > 1 else 1, vocab_size)
            chosen, ids = top_k(logits, count)
        if not forcing and self.sampler is None:  # the first chosen is the row's largest logit
            normaliser = log_normaliser(logits, chosen[:, :1], ids[:, :1])
        else:
            normaliser = ops.logsumexp(unforced, axis=-1, keepdims=True)
        return chosen - normaliser, ops.cast(ids, "int32")

