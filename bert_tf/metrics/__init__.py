"""Task metrics computed in numpy / Python on predictions (GLUE, SQuAD, NER)."""
