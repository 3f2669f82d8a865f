"""Desktop Queue: a desktop queue for AI generation jobs that never loses one."""

__version__ = "0.1.0"
