#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A small agent loop on Airlock: a model writes code, the code runs in a
sandbox (a microVM with no network), the agent reads the result and, when
it failed or printed the wrong answer, asks the model again with what went
wrong, up to a few attempts.

The "model" here is a stand-in that makes a mistake first and fixes it
from the error it is shown: put a call to your LLM in its place.

    python3 examples/python/agent_loop.py [--template base]

The daemon: AIRLOCK_SOCKET (default /run/airlock/airlockd.sock), or
AIRLOCK_HOST=tcp://ADDR:PORT with AIRLOCK_TOKEN. Exits 0 when the task was
solved, 1 when every attempt failed."""
import argparse
import os
import sys

try:
    import airlock
except ImportError:  # run from a checkout without `pip install ./sdk/python`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
    import airlock

TASK = "Print the first ten prime numbers on one line, separated by spaces."
EXPECTED = "2 3 5 7 11 13 17 19 23 29"
MAX_ATTEMPTS = 4
SOLUTION = "/work/solution.py"


# The function both of the model's drafts define.
PRIMES = ("def primes(n):\n"
          "    found = []\n"
          "    k = 2\n"
          "    while len(found) < n:\n"
          "        if all(k % p for p in found):\n"
          "            found.append(k)\n"
          "        k += 1\n"
          "    return found\n")


def model(task, feedback):
    """Returns Python code for the task; feedback is None on the first
    attempt, else what went wrong with the previous one."""
    if feedback is None:  # a first draft with a typo, as models make
        return PRIMES + "prnt(' '.join(map(str, primes(10))))\n"
    if "NameError" in feedback:  # reads the traceback and fixes the name
        return ("import sys\n" + PRIMES + "print(' '.join(map(str, primes(10))))\n"
                "print('checked', len(primes(10)), 'primes', file=sys.stderr)\n")
    return "print('I give up')\n"


def solve(sb, task, expected):
    """The loop: write, run, read, retry. Returns the attempt that worked, or None."""
    sb.files.mkdir(os.path.dirname(SOLUTION))
    feedback = None
    for attempt in range(1, MAX_ATTEMPTS + 1):
        code = model(task, feedback)
        sb.files.write_text(SOLUTION, code)
        print(f"--- attempt {attempt}: wrote {len(code)} bytes to {SOLUTION}")
        result = sb.exec(["python3", SOLUTION], timeout=60,
                         stream=lambda chunk: print(f"    [{chunk.stream}] {chunk.text.rstrip()}"))
        answer = result.stdout.strip()
        if result.exit_code == 0 and answer == expected:
            print(f"--- attempt {attempt}: solved: {answer}")
            return attempt
        if result.exit_code != 0:
            feedback = f"the code exited with {result.exit_code}:\n{result.stderr[-2000:]}"
        else:
            feedback = f"the code printed {answer!r}, expected {expected!r}"
        print(f"--- attempt {attempt}: failed: {feedback.strip().splitlines()[-1]}")
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--template", default=os.environ.get("AIRLOCK_TEMPLATE", "base"),
                    help="a template with python3 (default base)")
    args = ap.parse_args()
    with airlock.Sandbox.create(template=args.template, vcpus=1, memory_mib=256, network=[],
                                metadata={"example": "agent_loop"}, timeout=600) as sb:
        print(f"sandbox {sb.id} ({sb.template}) is {sb.state}")
        attempt = solve(sb, TASK, EXPECTED)
    if attempt is None:
        print(f"not solved in {MAX_ATTEMPTS} attempts", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
