"""The course's widget toolkit, kept apart from the course itself: what makes an explorer answer fast in a
browser, and what every widget shares.

``png``: a figure encoded as a PNG in about 10 ms (Pillow takes 35), at the screen's pixel ratio; ``redraw``: only
the changed artists of a figure drawn again; ``look_ahead``: the next likely setting prepared while the kernel
waits; ``controls``: a figure shown in an ``Image``, errors shown in the widget, the "Run this cell" sentence.
``words``: how a count is written ("1 row", "2 rows"), for figures, widgets and check messages alike.
A reader of the course never needs to step through them: ``dpcourse.viz`` draws the figures, ``dpcourse.widgets``
builds the explorers, and both use this room.
"""
