"""The one rule for calling a measured point CPU-bound.

A point is CPU-bound when more than CPU_BOUND_SHARE of the machine's cores
were busy while it ran: busy with anyone's un-niced work (the job's own
included) where the run measured the whole machine (bench/scaling.py reads
/proc/stat: over the measured steps alone where it recorded them, since
start-up can keep the machine busier than the steps do; over the whole job
in sweeps from before that), otherwise busy with the job's own processes (bench/allreduce_crossover.py
counts only its ranks' CPU time). There the CPU, not the link, may have set
the step time, so such a point is marked and never ranked: neither the
verdicts, the maps nor the pages in docs/results/ may say a strategy won it.

Both shares are fractions of every core of the machine (0 to 1). Niced work
is left out because CFS gives nice 15 a weight of 36 against 1024: builds
at nice 15 yield to an un-niced job.
"""

CPU_BOUND_SHARE = 0.7


def is_cpu_bound(machine_busy_unniced=None, job_cpu_share=None, share=CPU_BOUND_SHARE):
    """Whether a point was CPU-bound: the machine's un-niced busy share when
    the run measured it, else the job's own share of the cores, over share.
    A point with neither measured is not called CPU-bound."""
    measured = machine_busy_unniced if machine_busy_unniced is not None else job_cpu_share
    return measured is not None and measured > share


def machine_busy_of(point):
    """The machine's un-niced busy share the rule reads for an aggregated
    point (the max over its repeats): over the measured steps alone where the
    run recorded that (`machine_busy_unniced_timed`, bench/scaling.py), else
    over the whole job, start-up included. None where neither was measured."""
    timed = point.get("machine_busy_unniced_timed_max")
    return timed if timed is not None else point.get("machine_busy_unniced_max")


def describe(share=CPU_BOUND_SHARE):
    """The rule in a few words, for table footers and pages."""
    return (f"CPU-bound: more than {100 * share:.0f}% of the machine's cores busy "
            "(un-niced work of anyone where the machine was measured, over the measured steps "
            "where recorded, else the job's own)")
