"""Lesson 20's checked exercises."""
