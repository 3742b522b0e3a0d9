"""What the swarm's processes say to each other: the children's state-pipe lines (child_lines.py) and
the supervisor <-> fork server messages (forkserver_messages.py). Both sides import these modules, so
they hold formats only, no process's logic."""
