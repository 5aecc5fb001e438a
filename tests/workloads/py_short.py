"""A short-lived Python process: burst() spins for SECONDS (default 0.2)
of CPU time, then the process exits."""
import sys
import time


def burst(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(100):
            x += i
    return x


burst(float(sys.argv[1]) if len(sys.argv) > 1 else 0.2)
