"""The encoder's numbers on MiniLM's real weights against those its code gave before it was
split into the `bert_tf.encoder` package (tests/fixtures/encoder_numerics.npz, written by
tests/fixtures/make_encoder_numerics.py from that code): for absolute and relative positions,
pre-LN, padding-free layers, packed rows and recomputed layers, the inference outputs and one
training step's loss and gradients.

On a machine like the one that wrote the fixture (same TensorFlow, same CPU vector
instructions) they must be equal bit for bit; elsewhere float32 kernels differ, and they must
agree within float32 noise.
"""

import encoder_numerics
import numpy as np
import pytest

FIXTURE = "fixtures/encoder_numerics.npz"


@pytest.fixture(scope="module")
def fixture():
    import os

    return dict(np.load(os.path.join(os.path.dirname(__file__), FIXTURE)))


@pytest.mark.parametrize("variant", encoder_numerics.VARIANTS)
def test_numerics_unchanged(fixture, minilm_converted, variant):
    ours = encoder_numerics.compute(minilm_converted, variant)
    expected = {key.split("/", 1)[1]: value for key, value in fixture.items()
                if key.startswith(variant + "/")}
    assert sorted(ours) == sorted(expected)
    np.testing.assert_array_equal(ours.pop("variable_names"), expected.pop("variable_names"))
    if str(fixture["machine_key"]) == encoder_numerics.machine_key():
        for key, value in ours.items():
            np.testing.assert_array_equal(value, expected[key], err_msg=f"{variant}: {key}")
        return
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(ours[key], expected[key], atol=1e-4, err_msg=key)
    np.testing.assert_allclose(ours["loss"], expected["loss"], atol=1e-6)
    np.testing.assert_allclose(ours["gradient_square_sum"], expected["gradient_square_sum"],
                               rtol=1e-3, atol=1e-12)
    # Sums and projections may cancel to near zero: bounded by the gradient's norm.
    scale = np.sqrt(expected["gradient_square_sum"]) + 1e-9
    for key in ("gradient_sum", "gradient_projection"):
        assert np.all(np.abs(ours[key] - expected[key]) <= 1e-3 * scale * 10), key
