# CPU lists and cores, for the suites that check where ranks run.

# A CPU list (0-2,5) as one CPU a line.
cpu_list() {
	tr ',' '\n' | awk -F- 'NF { for (c = $1; c <= (NF > 1 ? $2 : $1); c++) print c }'
}

# The cores of the CPUs on standard input, from sysfs as collx-run's
# --bind reads it: one line per core, its CPUs joined by commas, cores in
# the order of their first CPU (a CPU without topology a core of its own).
cores_of() {
	local c
	while read -r c; do
		echo "$(cat "/sys/devices/system/cpu/cpu$c/topology/physical_package_id" 2>/dev/null || echo -)" \
		    "$(cat "/sys/devices/system/cpu/cpu$c/topology/core_id" 2>/dev/null || echo "x$c")" "$c"
	done | awk '{ k = $1 " " $2; if (!(k in core)) { order[n++] = k; core[k] = $3 }
	    else core[k] = core[k] "," $3 }
	    END { for (i = 0; i < n; i++) print core[order[i]] }'
}
