"""Experiments for lesson 21 (fsdp2): each runs the real thing on gloo ranks and measures the answer."""

EXPERIMENTS = ()
