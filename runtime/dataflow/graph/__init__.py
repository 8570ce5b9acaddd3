"""Graph: the graph runtime inside a task: the graph operator and its collaborators (``operator``,
``window_input``, ``supersteps``, ``progress``, ``context``), its array form (``array_operator``,
``array_input``, ``array_supersteps``, ``array_context``, ``chunks``, ``partition``,
``partition_changes``, ``arrays``), removed edges and vertices (``removals``: a removed edge goes
there, applied to the task's edge halves), and the changing graph kept per version (``versions``,
``versioned_operator``, ``version_supersteps``, ``array_versioned_operator``). It may import
``columns/``, ``time/`` and the operator base of the top level (``operators``), never the task
machinery (task, fetch, emitter, iteration), which imports it.
"""
