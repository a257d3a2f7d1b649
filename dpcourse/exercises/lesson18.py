"""Lesson 18's checked exercises."""
