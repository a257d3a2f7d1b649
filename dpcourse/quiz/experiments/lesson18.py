"""Experiments for lesson 18 (zero1): each runs the real thing on gloo ranks and measures the answer."""

EXPERIMENTS = ()
