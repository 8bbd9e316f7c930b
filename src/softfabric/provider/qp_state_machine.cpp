#include "provider/qp_state_machine.h"

namespace softfabric::provider {

TransitionRule transition_rule(ibv_qp_type type, ibv_qp_state from, ibv_qp_state to) {
    const bool ud = type == IBV_QPT_UD;
    const bool rc = type == IBV_QPT_RC;
    TransitionRule r;
    if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
        r.allowed = true;  // from any state
        return r;
    }
    switch (from) {
        case IBV_QPS_RESET:
            if (to == IBV_QPS_INIT) {
                r.allowed = true;
                r.required = IBV_QP_PKEY_INDEX | IBV_QP_PORT | (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
            }
            break;
        case IBV_QPS_INIT:
            if (to == IBV_QPS_INIT) {
                r.allowed = true;
                r.optional = IBV_QP_PKEY_INDEX | IBV_QP_PORT | (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
            } else if (to == IBV_QPS_RTR) {
                r.allowed = true;
                if (rc) {
                    r.required = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
                    r.optional = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
                } else if (ud) {
                    r.optional = IBV_QP_PKEY_INDEX | IBV_QP_QKEY;
                } else {  // UC
                    r.required = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
                    r.optional = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
                }
            }
            break;
        case IBV_QPS_RTR:
            if (to == IBV_QPS_RTS) {
                r.allowed = true;
                if (rc) {
                    r.required = IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_MAX_QP_RD_ATOMIC;
                    r.optional = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
                                 IBV_QP_PATH_MIG_STATE;
                } else if (ud) {
                    r.required = IBV_QP_SQ_PSN;
                    r.optional = IBV_QP_CUR_STATE | IBV_QP_QKEY;
                } else {
                    r.required = IBV_QP_SQ_PSN;
                    r.optional = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE;
                }
            }
            break;
        case IBV_QPS_RTS:
            if (to == IBV_QPS_RTS) {
                r.allowed = true;
                if (rc)
                    r.optional = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
                                 IBV_QP_MIN_RNR_TIMER;
                else if (ud)
                    r.optional = IBV_QP_CUR_STATE | IBV_QP_QKEY;
                else
                    r.optional = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE;
            }
            break;
        case IBV_QPS_SQE:
            if (to == IBV_QPS_RTS && !rc) {
                r.allowed = true;
                r.optional = IBV_QP_CUR_STATE | (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
            }
            break;
        default:
            break;  // SQD is not implemented: transitions into and out of it fail
    }
    return r;
}

bool transition_ok(ibv_qp_type type, ibv_qp_state from, ibv_qp_state to, int mask) {
    TransitionRule r = transition_rule(type, from, to);
    if (!r.allowed) return false;
    mask &= ~(IBV_QP_STATE | IBV_QP_CUR_STATE);
    if ((mask & r.required) != r.required) return false;
    return (mask & ~(r.required | r.optional)) == 0;
}

bool dc_transition_ok(bool initiator, ibv_qp_state from, ibv_qp_state to, int mask) {
    mask &= ~(IBV_QP_STATE | IBV_QP_CUR_STATE);
    int required = 0, optional = 0;
    if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
        return true;
    } else if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
        required = IBV_QP_PKEY_INDEX | IBV_QP_PORT | (initiator ? 0 : IBV_QP_ACCESS_FLAGS);
        optional = initiator ? IBV_QP_ACCESS_FLAGS : 0;
    } else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
        required = IBV_QP_PATH_MTU | (initiator ? 0 : IBV_QP_AV | IBV_QP_MIN_RNR_TIMER);
        optional = IBV_QP_AV | IBV_QP_PKEY_INDEX | (initiator ? 0 : IBV_QP_ACCESS_FLAGS);
    } else if (initiator && from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
        required = IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    } else if (initiator && from == IBV_QPS_RTS && to == IBV_QPS_RTS) {
        optional = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
    } else {
        return false;
    }
    return (mask & required) == required && (mask & ~(required | optional)) == 0;
}

}  // namespace softfabric::provider
