#!/usr/bin/python3
"""Checks for the train suite, with dpref.py's NumPy comparisons (no
torch: one process checks every run of a test).

usage:
  trainref.py cmp REF.safetensors REF.csv DP1.safetensors DP1.csv \\
      TRAINED CSV [TRAINED CSV...]
      each trained model and loss CSV against the float64 reference
      (piperef.py train's: weights and losses within 1e-5 relative, 1e-6
      absolute) and against collx-dp on one rank (losses within 1e-5,
      weights within 1e-4 relative). TRAINREF_SKIP=SUFFIX leaves out
      tensors named ...SUFFIX.
Exit 0 when all match, 1 (with a message) when not.
"""
import os
import sys

from dpref import close, cmd_cmp, read_losses


def check(ref, ref_csv, dp, dp_csv, trained, csv, skip):
    cmd_cmp(ref, trained, 1e-5, 1e-6, skip)
    cmd_cmp(dp, trained, 1e-4, 1e-6, skip)
    got = read_losses(csv)
    close(f"{csv}: losses against the reference", read_losses(ref_csv), got,
          1e-5, 1e-7)
    close(f"{csv}: losses against collx-dp", read_losses(dp_csv), got,
          1e-5, 1e-7)


def main():
    if len(sys.argv) < 8 or sys.argv[1] != "cmp" or len(sys.argv) % 2:
        sys.exit(__doc__)
    a = sys.argv[2:]
    skip = os.environ.get("TRAINREF_SKIP")
    for trained, csv in zip(a[4::2], a[5::2]):
        print(f"# {trained}, {csv}", flush=True)
        check(*a[:4], trained, csv, skip)


if __name__ == "__main__":
    main()
