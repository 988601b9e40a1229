"""The run directory and what reads or writes whole runs: its lifecycle and checks (`directory`), the one-writer
lock (`lock`), loading a run's model (`loading`), compare, export, tail averaging and run groups."""
