"""Real capture: a small PyTorch serving loop under torch.profiler writing genuine traces, logs and bench files.

Needs the optional `capture` extra (torch); nothing here imports torch until a capture runs.
"""
