// libsigmatrace.so entry point (the verbs wrappers are added by the host-tracing issue).
