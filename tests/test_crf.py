"""The linear-chain CRF (bert_tf.crf) against pytorch-crf and a brute-force search."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import crf

torch = pytest.importorskip("torch")
torchcrf = pytest.importorskip("torchcrf")


def _random_case(seed, batch=6, seq=9, num_tags=5):
    """float64 emissions, tags and parameters, and masks of every kind: all on, none on, one
    on, and random gaps (the first position off in some rows)."""
    rng = np.random.default_rng(seed)
    mask = (rng.random((batch, seq)) < 0.6).astype(np.int32)
    mask[0], mask[1], mask[2] = 1, 0, 0
    mask[2, seq // 2] = 1
    mask[3, 0] = 0
    return dict(
        emissions=rng.normal(size=(batch, seq, num_tags)) * 2,
        tags=rng.integers(0, num_tags, (batch, seq)), mask=mask,
        transitions=rng.normal(size=(num_tags, num_tags)),
        start_transitions=rng.normal(size=num_tags), end_transitions=rng.normal(size=num_tags))


def _torch_crf(case):
    num_tags = case["transitions"].shape[0]
    model = torchcrf.CRF(num_tags, batch_first=True).double()
    with torch.no_grad():
        for name in ("transitions", "start_transitions", "end_transitions"):
            getattr(model, name).copy_(torch.tensor(case[name]))
    return model


def _reference(case):
    """pytorch-crf's log-likelihood of each row over its on positions (pytorch-crf takes a
    prefix mask, so each row's on positions are given to it alone), and the gradients of
    their sum wrt the emissions and the three parameters."""
    model = _torch_crf(case)
    emissions = torch.tensor(case["emissions"], requires_grad=True)
    likelihoods = []
    for row, mask in enumerate(case["mask"]):
        on = torch.tensor(np.nonzero(mask)[0])
        if len(on) == 0:
            likelihoods.append(torch.zeros((), dtype=torch.float64))
            continue
        likelihoods.append(model(emissions[row, on][None],
                                 torch.tensor(case["tags"][row, on.numpy()])[None],
                                 reduction="sum"))
    likelihoods = torch.stack(likelihoods)
    likelihoods.sum().backward()
    grads = {"emissions": emissions.grad.numpy(),
             **{name: getattr(model, name).grad.numpy()
                for name in ("transitions", "start_transitions", "end_transitions")}}
    return likelihoods.detach().numpy(), grads


def _ours(case):
    variables = {name: tf.Variable(case[name]) for name in
                 ("emissions", "transitions", "start_transitions", "end_transitions")}
    with tf.GradientTape() as tape:
        likelihoods = crf.log_likelihood(
            variables["emissions"], tf.constant(case["tags"]), tf.constant(case["mask"]),
            variables["transitions"], variables["start_transitions"],
            variables["end_transitions"])
        total = tf.reduce_sum(likelihoods)
    grads = tape.gradient(total, variables)
    return likelihoods.numpy(), {name: grad.numpy() for name, grad in grads.items()}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_log_likelihood_and_gradients_equal_pytorch_crf(seed):
    case = _random_case(seed)
    expected, expected_grads = _reference(case)
    likelihoods, grads = _ours(case)
    assert likelihoods[1] == 0.0  # No position on.
    np.testing.assert_allclose(likelihoods, expected, rtol=0, atol=1e-5)
    for name, grad in expected_grads.items():
        np.testing.assert_allclose(grads[name], grad, rtol=0, atol=1e-5, err_msg=name)


def test_float32_log_likelihood_is_close_to_float64():
    case = _random_case(3)
    expected, _ = _reference(case)
    likelihoods = crf.log_likelihood(
        tf.constant(case["emissions"], tf.float32), tf.constant(case["tags"]),
        tf.constant(case["mask"]), case["transitions"], case["start_transitions"],
        case["end_transitions"])
    assert likelihoods.dtype == tf.float32
    np.testing.assert_allclose(likelihoods.numpy(), expected, rtol=1e-5, atol=1e-4)


def _brute_force(emissions, mask, transitions, start, end):
    """The best tags at each on position, by scoring every tag sequence."""
    on = np.nonzero(mask)[0]
    if len(on) == 0:
        return [], 0.0
    num_tags = transitions.shape[0]
    best, best_score = None, -np.inf
    for tags in itertools.product(range(num_tags), repeat=len(on)):
        score = start[tags[0]] + end[tags[-1]] + sum(
            emissions[t, tag] for t, tag in zip(on, tags, strict=True)) + sum(
            transitions[a, b] for a, b in zip(tags[:-1], tags[1:], strict=True))
        if score > best_score:
            best, best_score = list(tags), score
    return best, best_score


@pytest.mark.parametrize("seed", [0, 1])
def test_viterbi_equals_brute_force(seed):
    case = _random_case(seed + 10, batch=8, seq=7, num_tags=4)
    case["mask"][4] = 1  # Seven positions on: 4^7 sequences.
    tags, scores = crf.viterbi_decode(
        tf.constant(case["emissions"]), tf.constant(case["mask"]), case["transitions"],
        case["start_transitions"], case["end_transitions"])
    tags, scores = tags.numpy(), scores.numpy()
    for row, mask in enumerate(case["mask"]):
        expected, expected_score = _brute_force(
            case["emissions"][row], mask, case["transitions"], case["start_transitions"],
            case["end_transitions"])
        assert list(tags[row][mask == 1]) == expected, row
        assert np.all(tags[row][mask == 0] == 0)
        assert scores[row] == pytest.approx(expected_score, abs=1e-9)


def test_viterbi_equals_pytorch_crf_decode():
    case = _random_case(20, batch=16, seq=30, num_tags=9)
    tags, _ = crf.viterbi_decode(
        tf.constant(case["emissions"]), tf.constant(case["mask"]), case["transitions"],
        case["start_transitions"], case["end_transitions"])
    model = _torch_crf(case)
    for row, mask in enumerate(case["mask"]):
        on = np.nonzero(mask)[0]
        if len(on):
            expected = model.decode(torch.tensor(case["emissions"][row, on])[None])[0]
            assert list(tags.numpy()[row][on]) == expected


def test_zero_parameters_score_positions_independently():
    """With zero transitions the CRF is a per-position softmax: its negative log-likelihood
    is the sum of the positions' cross-entropies and Viterbi is the argmax."""
    case = _random_case(4)
    zeros = np.zeros_like(case["transitions"]), np.zeros_like(case["start_transitions"])
    likelihoods = crf.log_likelihood(tf.constant(case["emissions"]),
                                     tf.constant(case["tags"]), tf.constant(case["mask"]),
                                     zeros[0], zeros[1], zeros[1]).numpy()
    log_probs = case["emissions"] - np.log(np.exp(case["emissions"]).sum(-1, keepdims=True))
    gold = np.take_along_axis(log_probs, case["tags"][..., None], -1)[..., 0]
    np.testing.assert_allclose(likelihoods, (gold * case["mask"]).sum(1), atol=1e-9)
    tags, _ = crf.viterbi_decode(tf.constant(case["emissions"]), tf.constant(case["mask"]),
                                 zeros[0], zeros[1], zeros[1])
    np.testing.assert_array_equal(tags.numpy(), case["emissions"].argmax(-1) * case["mask"])
