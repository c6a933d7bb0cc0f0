"""bridges: config-driven processes that move messages between STOMP and other systems.

The engine and its endpoints arrive with the bridges work (see README).
"""
