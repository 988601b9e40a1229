"""Bottom leaves for files: atomic writing (`atomic`), the checkpoint format (`checkpoint`) and PEFT adapter
directories (`adapters`). They import nothing of evotune but `errors`, so every layer may use them."""
