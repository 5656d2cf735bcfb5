"""Raw text -> pre-trained BERT in one command: prepare the corpus, learn a vocab, write
records, pre-train phase 1 (short sequences) and phase 2 (long ones, from phase 1), evaluate
on held-out text, printing each stage's time (`make pretrain-example`).

Example (the shipped corpus, bert_tiny, a few minutes on 2 cores):
  python scripts/pretrain_recipe.py --output_dir=pretrain_example
"""

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import tool_flags

tool_flags.define_recipe_flags()


def main(_):
    # Imported here: the data stages' worker processes re-import this module and should not
    # load TensorFlow.
    from bert_tf.cli import recipe

    recipe.run_recipe(options.RecipeOptions.from_flags(flags.FLAGS))


if __name__ == "__main__":
    errors.run_main(main)
