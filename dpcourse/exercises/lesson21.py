"""Lesson 21's checked exercises."""
