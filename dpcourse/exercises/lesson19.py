"""Lesson 19's checked exercises."""
