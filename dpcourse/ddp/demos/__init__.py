"""The DDP lessons' measurements: each module starts real ranks, runs one thing, and returns numbers.

One module per topic, named after it (``collectives``, ``sampling``, ``uneven``, ``memory``...), and
``equivalence`` for the first one: gradients averaged, weights equal to one device's, buffers from rank 0.
The lessons print what these return; the quizzes' experiments call them too.
"""
