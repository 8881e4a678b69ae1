"""The in-process algorithmic problems: targets, held-out eval, text <-> ids, and chunks equal
to the generic ones."""

import numpy as np
import pytest

from problems.algorithmic import (AlgorithmicCopy, AlgorithmicProblem, AlgorithmicReverse,
                                 SymbolSequences)
from t2t_repro.data.problem import EVAL, TRAIN, UnencodableInputError
from t2t_repro.names import EOS_ID


class SmallReverse(AlgorithmicReverse):
    num_examples = {TRAIN: 2000, EVAL: 300}


class SmallSort(AlgorithmicProblem):
    """Defined by `target_of` alone, as a user's problem may be."""
    num_symbols = 4
    max_sequence_length = 6
    num_examples = {TRAIN: 500, EVAL: 100}

    def target_of(self, sequence):
        return sorted(sequence)


def first_examples(problem, mode, count):
    return [
        {key: value.numpy().tolist() for key, value in example.items()}
        for example in problem.examples(mode).take(count)
    ]


@pytest.mark.parametrize("problem_class, transform", [
    (AlgorithmicCopy, lambda ids: ids),
    (AlgorithmicReverse, lambda ids: ids[::-1]),
])
def test_targets_are_the_transformed_inputs_ending_in_eos(problem_class, transform):
    problem = problem_class()
    for example in first_examples(problem, TRAIN, 50):
        inputs, targets = example["inputs"], example["targets"]
        assert inputs[-1] == EOS_ID and targets[-1] == EOS_ID
        assert targets[:-1] == transform(inputs[:-1])
        assert all(2 <= token < problem.input_vocab_size for token in inputs[:-1])


def test_eval_sequences_never_occur_in_training():
    problem = SmallReverse()
    train = {tuple(s) for s in problem.sequences(TRAIN)}
    held_out = problem.sequences(EVAL)
    assert held_out, "every eval sequence was also a training sequence"
    assert not train & {tuple(s) for s in held_out}


def test_eval_keeps_exactly_the_eval_draws_absent_from_training():
    problem = SmallSort()
    train = {tuple(s) for s in problem.sequences(TRAIN)}
    drawn = SymbolSequences.random(problem.seeds[EVAL], problem.num_examples[EVAL],
                                   problem.num_symbols, problem.max_sequence_length)
    expected = [s for s in drawn.as_lists() if tuple(s) not in train]
    assert 0 < len(expected) < problem.num_examples[EVAL]  # some dropped, some kept
    assert problem.sequences(EVAL) == expected


@pytest.mark.parametrize("problem_class", [AlgorithmicCopy, AlgorithmicReverse, SmallSort])
def test_every_target_is_target_of_its_sequence(problem_class):
    """The problems' array forms of their targets against their one-sequence definitions."""
    problem = problem_class()
    symbols = SymbolSequences.random(5, 3000, problem.num_symbols, problem.max_sequence_length)
    targets = problem.target_symbols(symbols).as_lists()
    assert targets == [problem.target_of(s) for s in symbols.as_lists()]


@pytest.mark.parametrize("problem_class", [SmallReverse, SmallSort])
def test_token_arrays_hold_the_examples_in_their_order(problem_class):
    problem = problem_class()
    for mode in (TRAIN, EVAL):
        arrays = problem.token_arrays(mode)
        examples = first_examples(problem, mode, -1)
        assert len(arrays) == len(examples) == len(problem.sequences(mode))
        for index, example in enumerate(examples):
            assert {key: value.tolist() for key, value in arrays[index].items()} == example
            assert example["inputs"] == problem.encode(" ".join(
                map(str, problem.sequences(mode)[index])))


def test_sequences_are_reproducible_and_modes_differ():
    first, second = SmallReverse(), SmallReverse()
    assert first.sequences(TRAIN) == second.sequences(TRAIN)
    assert first.sequences(TRAIN)[:20] != first.sequences(EVAL)[:20]
    lengths = [len(s) for s in first.sequences(TRAIN)]
    assert min(lengths) == 1 and max(lengths) == first.max_sequence_length


def test_text_round_trip_and_bad_symbols():
    problem = AlgorithmicReverse()
    ids = problem.encode("3 0 9")
    assert ids == [5, 2, 11, EOS_ID]
    assert problem.decode(ids) == "3 0 9"
    assert problem.decode(np.array([5, 2, EOS_ID, 7, 0])) == "3 0"
    with pytest.raises(UnencodableInputError, match=r"symbols 0\.\.9.*'12'"):
        problem.encode("1 12")


@pytest.mark.parametrize("text", ["1 x 2", "1 -1", "2.5", "1,2", "\u0663"])
def test_text_outside_the_alphabet_raises_a_specific_error_saying_what_is_accepted(text):
    """Not int()'s "invalid literal": the decoder turns this error into a report of the line."""
    with pytest.raises(UnencodableInputError, match=r"accepts only the symbols 0\.\.9 separated"):
        AlgorithmicReverse().encode(text)


def chunk_arrays(chunks, count):
    """Each chunk's flat ids and row splits, per feature."""
    return [{key: (value.flat_values.numpy(), value.row_splits.numpy())
             for key, value in chunk.items()} for chunk in chunks.take(count)]


def same_chunks(ours, theirs):
    return len(ours) == len(theirs) and all(
        chunk.keys() == other.keys() and all(
            np.array_equal(chunk[key][part], other[key][part]) for key in chunk for part in (0, 1))
        for chunk, other in zip(ours, theirs))


@pytest.mark.parametrize("mode, repeat, shard, count", [
    (TRAIN, False, (0, 1), 3),  # 2,000 examples in chunks of 700: two full and a short one
    (TRAIN, True, (0, 1), 4),  # the third chunk spans two passes
    (TRAIN, True, (1, 3), 3),
    (EVAL, True, (0, 1), 2),  # each chunk spans passes over the eval examples
    (EVAL, False, (1, 2), 1),
])
def test_chunks_equal_the_generic_chunks_of_the_examples(monkeypatch, mode, repeat, shard,
                                                          count):
    """The in-memory chunks against `Problem.example_chunks` (`ragged_batch` over `examples`):
    the same examples, order, passes and shards, and the same element spec. Chunks of 700
    instead of 16,384, so that a small problem has several."""
    import problems.algorithmic
    import t2t_repro.data.problem
    from t2t_repro.data.problem import Problem

    for module in (problems.algorithmic, t2t_repro.data.problem):
        monkeypatch.setattr(module, "CHUNK_SIZE", 700)
    problem = SmallReverse()
    ours = problem.example_chunks(mode, repeat=repeat, shard=shard)
    generic = Problem.example_chunks(problem, mode, repeat=repeat, shard=shard)
    assert ours.element_spec == generic.element_spec
    expected = chunk_arrays(generic, count)
    assert len(expected) == count
    assert same_chunks(chunk_arrays(ours, count), expected)
