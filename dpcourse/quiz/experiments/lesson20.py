"""Experiments for lesson 20 (zero3): each runs the real thing on gloo ranks and measures the answer."""

EXPERIMENTS = ()
