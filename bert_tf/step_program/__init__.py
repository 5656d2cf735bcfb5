"""The training step as a portable program: one StableHLO module any XLA device compiles.

`export` (TensorFlow) lowers a task's real training step (the model_fn of run_squad.py,
run_classifier.py or run_pretraining.py: forward, backward, clipping, the optimizer update and
global step + 1) to StableHLO beside `step.json` (the `manifest`) and the starting state;
`runtime` compiles and runs it through JAX's PJRT client on a CPU, GPU or TPU, without
TensorFlow; `checkpoint` turns the trained state back into a Google-layout checkpoint.

    manifest      step.json: every argument and result, its name, shape, dtype and role
    tensor_files  safetensors files of named arrays (the state, the feature batches)
    export        the step built, lowered and written (scripts/export_step.py)
    features      a task's TFRecords as fixed-shape batches
    runtime       compile, initialize and run on a device (scripts/run_step.py)
    checkpoint    a trained state as a Google-layout checkpoint

`manifest`, `tensor_files` and `runtime` import no TensorFlow: they run where only JAX is.
"""
