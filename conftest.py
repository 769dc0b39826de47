# The pytest plugin lives in the package (specgate.plugin, registered by entry point).
