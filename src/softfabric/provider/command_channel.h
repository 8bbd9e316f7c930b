// The uverbs command file of a fabric context, and completion channels.
//
// libibverbs creates a completion channel without asking the provider: ibv_create_comp_channel() writes an
// IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL command to the context's cmd_fd and expects the kernel to have filled
// in the new channel's fd when write() returns. There is no kernel here, so the fabric makes cmd_fd the
// write end of a pipe with no reader: the write raises SIGPIPE in the writing thread, synchronously, before
// write() returns. The provider's SIGPIPE handler recognizes a write to a fabric cmd_fd (the syscall
// registers are in the signal context: x86-64 keeps rdi/rsi/rdx across the syscall), executes the command
// (a socketpair whose read end becomes the channel fd), stores the response where the command says, and makes
// write() return the full length. Every other SIGPIPE goes to the previous disposition unchanged.
//
// Limits (docs/softfabric.md): x86-64 only; the calling thread must not block SIGPIPE while it calls
// ibv_create_comp_channel (the call then fails with EPIPE).
#pragma once

namespace softfabric::provider {

// Creates the command file for a new context: returns the fd to hand to libibverbs as cmd_fd (-1 + errno).
int open_command_file();
// Forgets a command file (free_context; libibverbs closes the fd itself).
void close_command_file(int fd);
// Installs the SIGPIPE handler if another one replaced it since (the replaced one is chained).
void ensure_sigpipe_handler();
// The provider's end of the completion channel whose application end is `channel_fd`; -1 if it is not a
// fabric channel.
int channel_event_fd(int channel_fd);

}  // namespace softfabric::provider
