"""Bottom leaves for files: atomic writing (`atomic`), the checkpoint format (`checkpoint`) and PEFT adapter
directories (`adapters`), where a reward module named in a config lives
(`reward_paths`). They import nothing of evotune but `errors`, so every layer may use them."""
