"""The PyTorch side of the comparison: transformers.BertForQuestionAnswering, same work.

Runs in a Python that has `torch` and `transformers` (never a bert_tf dependency):
builds `BertForQuestionAnswering` from the same `bert_config.json`, generates random
features of the same shapes on every step, and times either a training step
(forward, start/end loss, backward, global-norm clipping at 1.0, AdamW update with
weight decay 0.01 and epsilon 1e-6, as bert_tf's optimizer) or an inference
forward (`torch.inference_mode`, eval mode). With `--task=pretraining` the model is
`BertForPreTraining` (masked LM + next sentence, `--max_predictions_per_seq` labelled
positions per sequence, as bert_tf's records) and only training is timed; transformers
projects every position onto the vocabulary (its loss ignores the unlabelled ones),
where bert_tf's head gathers the masked positions first, as the original BERT. bf16 runs under
`torch.autocast("cpu", dtype=torch.bfloat16)`, parameters and optimizer state
stay fp32 (the same recipe as bert_tf's --precision=bf16).

Prints one JSON line with sequences_per_second, step_time_median_s,
step_time_p90_s and the per-step times. Usually called by compare_pytorch.py.
"""

import argparse
import json
import os
import statistics
import time


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bert_config_file", required=True)
    parser.add_argument("--task", choices=["squad", "pretraining"], default="squad")
    parser.add_argument("--mode", choices=["train", "infer"], default="train")
    parser.add_argument("--max_predictions_per_seq", type=int, default=20)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--max_seq_length", type=int, default=384)
    parser.add_argument("--num_warmup_steps", type=int, default=2)
    parser.add_argument("--num_steps", type=int, default=10)
    parser.add_argument("--num_threads", type=int, default=os.cpu_count())
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--compile", action="store_true", help="the step under torch.compile")
    parser.add_argument("--output_json", default=None)
    return parser.parse_args()


def main():
    args = parse_args()
    import torch
    import transformers

    torch.set_num_threads(args.num_threads)
    torch.manual_seed(0)
    with open(args.bert_config_file) as f:
        google = json.load(f)
    config = transformers.BertConfig(
        vocab_size=google["vocab_size"], hidden_size=google["hidden_size"],
        num_hidden_layers=google["num_hidden_layers"],
        num_attention_heads=google["num_attention_heads"],
        intermediate_size=google["intermediate_size"], hidden_act=google["hidden_act"],
        hidden_dropout_prob=google["hidden_dropout_prob"],
        attention_probs_dropout_prob=google["attention_probs_dropout_prob"],
        max_position_embeddings=google["max_position_embeddings"],
        type_vocab_size=google["type_vocab_size"],
        initializer_range=google["initializer_range"], layer_norm_eps=1e-12)
    pretraining = args.task == "pretraining"
    model = (transformers.BertForPreTraining if pretraining
             else transformers.BertForQuestionAnswering)(config).to(args.device)
    training = args.mode == "train"
    model.train(training)
    optimizer = None
    if training:
        no_decay = ("bias", "LayerNorm.weight")
        groups = [
            {"params": [p for n, p in model.named_parameters()
                        if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
            {"params": [p for n, p in model.named_parameters()
                        if any(nd in n for nd in no_decay)], "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=5e-5, eps=1e-6)

    batch, seq = args.batch_size, args.max_seq_length
    device = torch.device(args.device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16,
                              enabled=args.precision == "bf16")

    def features():
        return {
            "input_ids": torch.randint(0, config.vocab_size, (batch, seq), device=device),
            "attention_mask": torch.ones(batch, seq, dtype=torch.long, device=device),
            "token_type_ids": torch.randint(0, min(2, config.type_vocab_size), (batch, seq),
                                            device=device),
        }

    def labels():
        if not pretraining:
            return {"start_positions": torch.randint(0, seq, (batch,), device=device),
                    "end_positions": torch.randint(0, seq, (batch,), device=device)}
        masked = torch.full((batch, seq), -100, dtype=torch.long)
        for row in range(batch):
            positions = torch.randperm(seq - 2)[:args.max_predictions_per_seq] + 1
            masked[row, positions] = torch.randint(0, config.vocab_size, (len(positions),))
        return {"labels": masked.to(device),
                "next_sentence_label": torch.randint(0, 2, (batch,), device=device)}

    def train_step():
        inputs = features()
        with autocast:
            outputs = model(**inputs, **labels())
        optimizer.zero_grad(set_to_none=True)
        outputs.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return outputs.loss

    def infer_step():
        inputs = features()
        with torch.inference_mode(), autocast:
            outputs = model(**inputs)
        return outputs[0]

    step = train_step if training else infer_step
    if args.compile:
        step = torch.compile(step)

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize()

    start = time.perf_counter()
    step()  # torch.compile compiles here.
    synchronize()
    first_step_s = time.perf_counter() - start
    for _ in range(args.num_warmup_steps - 1):
        step()
    synchronize()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.num_steps):
        start = time.perf_counter()
        step()
        synchronize()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    ordered = sorted(times)
    result = {
        "framework": f"torch {torch.__version__} + transformers {transformers.__version__}",
        "task": args.task, "mode": args.mode, "precision": args.precision, "batch_size": batch,
        "max_seq_length": seq, "num_threads": torch.get_num_threads(),
        "attn_implementation": model.config._attn_implementation,
        "sequences_per_second": batch / median, "step_time_median_s": median,
        # Linear interpolation, as numpy.percentile's default.
        "step_time_p90_s": _percentile(ordered, 90), "step_time_s": times,
        "device": (torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"),
        "compiled": args.compile, "first_step_s": first_step_s,
        "peak_memory_mb": (torch.cuda.max_memory_allocated(device) / 2**20
                           if device.type == "cuda" else None),
    }
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(result, f, indent=2)
    print(json.dumps(result))


def _percentile(ordered, q):
    position = (len(ordered) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


if __name__ == "__main__":
    main()
