"""prepare's serial share: the CPU of its parent process against that of its workers.

    cd /tmp/scale-bench/project-25000 && python -m bench.prepare_share

Runs the prepare stage in this process, in the current project folder (one that
`bench/scale.py` left, for example: the folder's own copy of stages/ and bench/ runs), and
prints its wall time, the parent's CPU (what runs on one core: Amdahl's serial part) and the
workers' CPU. CPU times hold on a loaded machine where
wall-clock ratios do not: on 2 idle cores prepare's wall time is about
parent + workers / 2.
"""
import resource
import time


def main() -> None:
    tic = time.perf_counter()
    from stages.prepare import main as prepare

    prepare(args=[], standalone_mode=False)
    wall = time.perf_counter() - tic
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    parent, workers = me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime
    print(f"wall {wall:.2f} s; parent CPU {parent:.2f} s; workers CPU {workers:.2f} s; "
          f"serial share of the CPU {parent / (parent + workers):.3f}; on 2 idle cores about "
          f"{parent + workers / 2:.1f} s")


if __name__ == "__main__":
    main()
