"""That a run always ends and leaves nothing running: deadlines, the processes an engine runs in, a
watcher that outlives the run, and Ctrl-C / SIGTERM.

    watchdog     a deadline for every engine and server call; stacks dumped from what overran (_stacks)
    processes    which processes are ours, their memory, stopping them
    reaper       `python -m specgate.lifetime.reaper`: kills the run's engines if the run itself dies
    ipc          a directory per engine for the sockets vLLM leaves behind, removed with the engine
    interrupts   Ctrl-C and SIGTERM raise `Interrupted` in the main thread

Neighbours: used by engines (engine.py, server.py, host.py) and the plugin; it imports only the vocabulary.
"""
