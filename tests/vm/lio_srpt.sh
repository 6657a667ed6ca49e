# shellcheck shell=bash
# tests/vm/lio_srpt.sh - sourced: the kernel's LIO ib_srpt on rxe0, set up as blktests'
# start_lio_srpt does (tests/srp/rc): target port named by the node GUID, RDMA/CM on port
# 5555, an ACL by the initiator's address (10.99.0.1), two RAM LUNs (rd_mcp): LUN 0 of
# 256 MiB and LUN 1 of 64 MiB. Used by srp_linux.sh --lio (Linux ib_srp against LIO) and
# srp_lio.sh (ulp-initiator against LIO). Inside the VM only.
#
#   lio_srpt_start: loads ib_srpt and configures it; sets lio_srpt_login to the add_target
#                   options that reach it (id_ext=..,ioc_guid=..,dest=10.99.0.1:5555).
#                   Returns non-zero (with a message on stderr) on any failure.

lio_srpt_start() {
	local cfs=/sys/kernel/config/target guid tp
	modprobe target_core_mod || return 1
	# srp_max_req_size 8260: what ib_srp asks for by default (8 KiB of immediate data at 68).
	modprobe ib_srpt srp_max_req_size=8260 || return 1
	mkdir -p $cfs/core/rd_mcp_0/r0 $cfs/core/rd_mcp_1/r1
	echo rd_pages=65536 >$cfs/core/rd_mcp_0/r0/control
	echo rd_pages=16384 >$cfs/core/rd_mcp_1/r1/control
	echo 1 >$cfs/core/rd_mcp_0/r0/enable || return 1
	echo 1 >$cfs/core/rd_mcp_1/r1/enable || return 1
	mkdir -p $cfs/srpt
	echo 5555 >$cfs/srpt/discovery_auth/rdma_cm_port || return 1
	guid=$(cat /sys/class/infiniband/rxe0/node_guid) # "5054:00ff:fe12:3456"
	tp=$cfs/srpt/$guid/$guid
	mkdir -p "$tp"
	mkdir "$tp"/lun/lun_0 "$tp"/lun/lun_1
	ln -s $cfs/core/rd_mcp_0/r0 "$tp"/lun/lun_0/
	ln -s $cfs/core/rd_mcp_1/r1 "$tp"/lun/lun_1/
	mkdir "$tp"/acls/10.99.0.1 "$tp"/acls/10.99.0.1/lun_0 "$tp"/acls/10.99.0.1/lun_1
	ln -s "$tp"/lun/lun_0 "$tp"/acls/10.99.0.1/lun_0/
	ln -s "$tp"/lun/lun_1 "$tp"/acls/10.99.0.1/lun_1/
	echo 1 >"$tp"/enable || return 1
	# ib_srpt checks both halves of the target port id against srpt_service_guid, the
	# node GUID of the first HCA.
	guid=${guid//:/}
	# shellcheck disable=SC2034 # for the caller
	lio_srpt_login="id_ext=$guid,ioc_guid=$guid,dest=10.99.0.1:5555"
	# shellcheck disable=SC2034 # for the caller
	lio_srpt_port=$tp
}
