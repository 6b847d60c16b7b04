"""Plugins shipped with the compiler: the built-in CPU target and the Softmax custom-IP example."""
