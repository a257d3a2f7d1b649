"""The lessons that have quizzes: ``quizzes/NN_<name>.toml`` holds the questions, ``experiments/lessonNN.py``
the experiments that answer them.
"""

# One file per notebook, in course order; the notebooks load their quiz by these names.
LESSONS = (
    "00_start_here",
    "01_one_device",
    "02_scatter",
    "03_replicate",
    "04_parallel_apply",
    "05_gather",
    "06_backward",
    "07_end_to_end",
    "08_myths",
    "09_performance",
    "10_ddp_bridge",
    "11_review",
    "13_collectives",
    "14_accumulation",
    "15_memory",
    "16_mixed_precision",
    "17_ddp_in_practice",
)
