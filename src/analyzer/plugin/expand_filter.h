// filter.sigmatrace.expand: turns each `deferred_records` event into one event per captured call, the
// post_send, post_recv, post_srq_recv or poll_cq event immediate emission writes for the same call, so that
// any sink reads them (docs/analyzer.md, "Reading records with Babeltrace2"):
//
//   babeltrace2 --plugin-path=PREFIX/lib/sigmatrace/bt2-plugins TRACE_DIR -c filter.sigmatrace.expand -c sink.text.pretty
//
// Every other message passes through as it came.
#pragma once

#include <babeltrace2/babeltrace.h>

namespace sigmatrace::bt2plugin {

bt_component_class_initialize_method_status expand_init(bt_self_component_filter* self,
                                                        bt_self_component_filter_configuration* config,
                                                        const bt_value* params, void* init_data);
bt_message_iterator_class_initialize_method_status expand_iterator_init(bt_self_message_iterator* self,
                                                                        bt_self_message_iterator_configuration* config,
                                                                        bt_self_component_port_output* port);
void expand_iterator_finalize(bt_self_message_iterator* self);
bt_message_iterator_class_next_method_status expand_iterator_next(bt_self_message_iterator* self,
                                                                  bt_message_array_const msgs, uint64_t capacity,
                                                                  uint64_t* count);

}  // namespace sigmatrace::bt2plugin
