"""Experiments for lesson 19 (zero2): each runs the real thing on gloo ranks and measures the answer."""

EXPERIMENTS = ()
