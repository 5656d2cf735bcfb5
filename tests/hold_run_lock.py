"""Holds the run lock of the directory argv[1] (`bert_tf.training.run_lock.hold`) until killed, as a
run on that directory would: prints `held` once it holds it."""

import sys
import time

from bert_tf.training import run_lock

if __name__ == "__main__":
    with run_lock.hold(sys.argv[1]):
        print("held", flush=True)
        time.sleep(600)
