"""Host software for the DNN accelerator card: card backends, driver, memory manager, runtime."""
