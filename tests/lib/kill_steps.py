#!/usr/bin/python3
"""kill_steps.py RUN N SEED: reads the standard error of collx-run RUN
(N ranks of a training program with -v, --max-restarts 3) as it comes,
into run.log; at a random step within 20 after each start (a line
"PROGRAM: step K ..."; a restart line "... from step S of ...") kills a
random rank with SIGKILL, three times, each kill a line "STEP RANK" in
kills.log. Python rather than a shell loop, which falls behind at a step a
millisecond, or mawk, which reads a pipe in blocks. The pipe holds one
page: a reader that falls behind (a loaded machine) holds rank 0 back at
most a few dozen steps, where the default 64 KiB let a whole run end
before its kill came."""
import errno, fcntl, os, random, re, signal, subprocess, sys, time
run, n, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
random.seed(seed)

def shrink():
    """The pipe down to one page; False while it holds more than that
    (EBUSY), which the lines read meanwhile drain."""
    try:
        fcntl.fcntl(sys.stdin, fcntl.F_SETPIPE_SZ, os.sysconf("SC_PAGE_SIZE"))
    except OSError as e:
        if e.errno != errno.EBUSY:
            raise
        return False
    return True

def rank_pid(r):
    """The pid of rank r among collx-run's children."""
    for _ in range(100):
        kids = subprocess.run(["pgrep", "-P", str(run)], text=True,
                              capture_output=True).stdout.split()
        for p in kids:
            try:
                env = open(f"/proc/{p}/environ", "rb").read().split(b"\0")
            except OSError:
                continue
            if f"COLLX_RANK={r}".encode() in env:
                return int(p)
        time.sleep(0.01)
    sys.exit(f"rank {r} of collx-run {run} not found")

target, kills, small = 1 + random.randrange(20), 0, shrink()
with open("run.log", "w") as log, open("kills.log", "w") as kl:
    for line in iter(sys.stdin.readline, ""):
        small = small or shrink()
        log.write(line)
        log.flush()
        m = re.search(r" from step (\d+) of ", line)
        if line.startswith("collx-run: restart "):
            target = (int(m.group(1)) if m else 0) + 1 + random.randrange(20)
        elif kills < 3 and target is not None and f": step {target} " in line:
            r = random.randrange(n)
            os.kill(rank_pid(r), signal.SIGKILL)
            kl.write(f"{target} {r}\n")
            kl.flush()
            kills, target = kills + 1, None
