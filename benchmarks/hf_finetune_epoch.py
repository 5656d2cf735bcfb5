"""The Hugging Face side of finetune_epoch.py: one epoch of Trainer with length grouping.

Runs in a Python that has `torch`, `transformers` and `accelerate` (never a bert_tf
dependency): `BertForSequenceClassification` from the same MiniLM weights, the same train.tsv
(columns sentence, label) tokenized up front (truncated to --max_seq_length, not padded),
`Trainer` with the group_by_length sampler (`train_sampling_strategy="group_by_length"` in
transformers 5; `group_by_length=True` before) and `DataCollatorWithPadding` (each batch padded
to its longest example), the same batch, learning rate, 10 % warmup, AdamW (weight decay 0.01,
epsilon 1e-6), gradient clipping at 1.0, and full batches only (`dataloader_drop_last`), as
bert_tf trains. Times `trainer.train()`, then predicts dev.tsv (untimed) for its accuracy.
Also times the loop alone, from step --log_every to the last multiple of it (the bert_tf side
reads the same span from its progress records). Writes one JSON object to --output_json.
Usually called by finetune_epoch.py, and by finetune_command.py, which times the
whole process.
"""

import argparse
import csv
import dataclasses
import json
import os
import tempfile
import time


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model_dir", required=True, help="Hugging Face BERT directory.")
    parser.add_argument("--train_file", required=True)
    parser.add_argument("--dev_file", required=True)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="bf16: Trainer's bf16=True (torch.autocast on the CPU).")
    parser.add_argument("--num_threads", type=int, default=os.cpu_count())
    parser.add_argument("--log_every", type=int, default=10,
                        help="The loop rate is timed from this step to the last multiple of it.")
    parser.add_argument("--save_dir", default=None,
                        help="Saves the fine-tuned model and tokenizer here, as a whole "
                             "fine-tuning script does (finetune_command.py).")
    parser.add_argument("--output_json", required=True)
    return parser.parse_args()


def read_tsv(path):
    with open(path, encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    header = rows[0]
    return [(row[header.index("sentence")], row[header.index("label")]) for row in rows[1:]]


def main():
    args = parse_args()
    import torch
    import transformers

    torch.set_num_threads(args.num_threads)
    transformers.set_seed(args.seed)
    tokenizer = transformers.BertTokenizerFast(
        vocab_file=os.path.join(args.model_dir, "vocab.txt"), do_lower_case=True)
    train, dev = read_tsv(args.train_file), read_tsv(args.dev_file)
    labels = sorted({label for _, label in train})  # bert_tf's tsv task: sorted train labels.

    def encode(rows):
        encoded = tokenizer([text for text, _ in rows], truncation=True,
                            max_length=args.max_seq_length)
        return [{"input_ids": encoded["input_ids"][i],
                 "token_type_ids": encoded["token_type_ids"][i],
                 "attention_mask": encoded["attention_mask"][i],
                 "labels": labels.index(label)} for i, (_, label) in enumerate(rows)]

    train_set, dev_set = encode(train), encode(dev)
    model = transformers.BertForSequenceClassification.from_pretrained(
        args.model_dir, num_labels=len(labels))
    steps = len(train_set) // args.batch_size
    fields = {field.name for field in dataclasses.fields(transformers.TrainingArguments)}
    grouping = ({"train_sampling_strategy": "group_by_length"}
                if "train_sampling_strategy" in fields else {"group_by_length": True})
    with tempfile.TemporaryDirectory() as output_dir:
        training_args = transformers.TrainingArguments(
            output_dir=output_dir, per_device_train_batch_size=args.batch_size,
            per_device_eval_batch_size=64, num_train_epochs=1, learning_rate=args.learning_rate,
            warmup_steps=int(0.1 * steps), weight_decay=0.01, adam_epsilon=1e-6,
            max_grad_norm=1.0, dataloader_drop_last=True, save_strategy="no",
            eval_strategy="no", logging_strategy="no", report_to="none", disable_tqdm=True,
            use_cpu=True, bf16=args.precision == "bf16", seed=args.seed, data_seed=args.seed,
            **grouping)
        marks = {}

        class Marks(transformers.TrainerCallback):
            def on_step_end(self, args_, state, control, **kwargs):
                if state.global_step % args.log_every == 0:
                    marks[state.global_step] = time.perf_counter()

        trainer = transformers.Trainer(
            model=model, args=training_args, train_dataset=train_set,
            data_collator=transformers.DataCollatorWithPadding(tokenizer),
            processing_class=tokenizer, callbacks=[Marks()])
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
        predictions = trainer.predict(dev_set)
        if args.save_dir:
            trainer.save_model(args.save_dir)
    accuracy = float((predictions.predictions.argmax(-1) == predictions.label_ids).mean())
    steady = None
    if len(marks) >= 2:
        first, last = min(marks), max(marks)
        steady = (last - first) * args.batch_size / (marks[last] - marks[first])
    result = {"train_seconds": seconds, "steps": steps,
              "examples_per_second": steps * args.batch_size / seconds,
              "steady_examples_per_second": steady,
              "dev_accuracy": accuracy, "sampler": grouping,
              "framework": f"PyTorch {torch.__version__} + transformers "
                           f"{transformers.__version__}",
              "num_threads": torch.get_num_threads()}
    with open(args.output_json, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
