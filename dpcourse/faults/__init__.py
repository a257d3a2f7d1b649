"""Part IV, data parallel when it goes wrong: a rank that hangs, a rank that lags, a rank that dies.

Each module runs its failure on real ranks (``dpcourse.ranks.launcher.launch``, gloo on CPUs), shows what the
tools of torch.distributed report, and gives the learner what they need to find the rank and recover:

    hangs        a rank that skips a collective or calls another one: the timeout, DETAIL's check, the stacks
    hang_tools   what a rank uses to find a hang: DETAIL's check, every thread's stack, the Flight Recorder, its
                 stderr kept
    hang_runs    the notebook's side of hangs: start the ranks with faults, bring back what each rank saw
    hang_diagnosis   from the ranks' records of collectives to the rank and the call that diverged
    stragglers   a rank that is slow: why every rank looks slow under DDP, and how timestamps find it
    straggler_reading, straggler_report   the clocks read: who arrived last, who waited how long; what lesson 23
                 prints
    resume       a rank killed mid-epoch: restarts, snapshots, and a resumed run equal to an uninterrupted one
    restarts     torchrun --max-restarts' semantics on the course's launcher: when a rank dies, all stop, all start
                 again
    resume_training, resume_runs   lesson 24's killed-and-resumed training program and its runs
"""
