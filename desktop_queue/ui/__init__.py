"""The desktop window: item models, panes, dialogs and actions over the job engine.

Widgets hold no business rules: they ask :class:`~desktop_queue.ui.controller.Controller`
to act, and the pure :func:`~desktop_queue.ui.commands.actions_for` decides what a
selection allows.
"""
