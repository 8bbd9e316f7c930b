// Protection domains, memory regions and address handles. An MR is an entry in this process's arena MR table
// (shared_objects.h), which is how a peer checks an rkey: nothing is pinned, peers copy with process_vm_*.
#include <cerrno>
#include <new>

#include "core/fabric_objects.h"
#include "mlx5/frontend.h"
#include "provider/objects.h"

namespace softfabric::provider {

ibv_pd* alloc_pd(ibv_context* ctx) {
    auto* pd = new (std::nothrow) PdObject{};
    if (!pd) {
        errno = ENOMEM;
        return nullptr;
    }
    pd->id = context_of(ctx).rt->new_pd_id();
    pd->ibv.handle = static_cast<uint32_t>(pd->id);
    return &pd->ibv;
}

int dealloc_pd(ibv_pd* pd) {
    delete &pd_of(pd);
    return 0;
}

ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, uint64_t hca_va, int access) {
    // As in the kernel: remote write and remote atomic need local write.
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
        errno = EINVAL;
        return nullptr;
    }
    Runtime& rt = *context_of(pd->context).rt;
    auto* mr = new (std::nothrow) MrObject{};
    if (!mr) {
        errno = ENOMEM;
        return nullptr;
    }
    uint32_t key = register_memory(rt, pd_of(pd).id, addr, length, hca_va, access);
    if (!key) {
        delete mr;
        errno = ENOMEM;
        return nullptr;
    }
    mr->key = key;
    mr->vmr.ibv_mr.lkey = key;
    mr->vmr.ibv_mr.rkey = key;
    mr->vmr.ibv_mr.handle = key;
    mr->vmr.mr_type = pabi::IBV_MR_TYPE_MR;
    mr->vmr.access = access;
    return &mr->vmr.ibv_mr;
}

int dereg_mr(pabi::verbs_mr* vmr) {
    auto* mr = reinterpret_cast<MrObject*>(vmr);
    deregister_memory(*context_of(vmr->ibv_mr.context).rt, mr->key);
    delete mr;
    return 0;
}

ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
    if (attr->port_num != 1) {
        errno = EINVAL;
        return nullptr;
    }
    auto* ah = new (std::nothrow) AhObject{};
    if (!ah) {
        errno = ENOMEM;
        return nullptr;
    }
    std::optional<NicId> nic = attr->is_global ? nic_from_gid(attr->grh.dgid) : nic_from_lid(attr->dlid);
    ah->valid = nic.has_value();
    if (nic) ah->dest.nic = *nic;
    ah->dest.sl = attr->sl;
    ah->dest.has_grh = attr->is_global;
    ah->dest.dgid = attr->grh.dgid;
    ah->ibv.handle = 0;
    (void)pd;
    return &ah->ibv;
}

int destroy_ah(ibv_ah* ah) {
    mlx5::forget_verbs_ah(ah);  // its mlx5 address vector (mlx5dv_init_obj) goes with it
    delete reinterpret_cast<AhObject*>(ah);
    return 0;
}

}  // namespace softfabric::provider
