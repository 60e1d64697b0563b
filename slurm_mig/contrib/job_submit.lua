--[[
slurm-mig job_submit plugin (Slurm's job_submit/lua, Lua 5.1).

Install: copy to the directory of slurm.conf as job_submit.lua, set
JobSubmitPlugins=lua in slurm.conf and run `scontrol reconfigure`.

For jobs submitted to the MIG partition:
  * a `migplan=` word in the comment (the planner's token) is removed: only the
    planner writes tokens;
  * a comment longer than MAX_COMMENT bytes (after that) is rejected: Slurm keeps
    1024, and the planner needs the rest for its token and its notes;
  * a malformed `mig:` hint in --comment is rejected at submission with the same
    message as slurm_mig.hints.parse_hints (the user sees it on stderr), and so
    is a `deadline=` date in the past, and the slips the grammar refuses rather than
    misread: `mem=12` (bytes without a unit below 1 MiB), `time=2 hours` (a unit word
    after a bare number), `MIG:mem=12G` (the prefix not in lower case) and a space
    inside the word (`mig: mem=12G`, `mig:mem = 12G`);
  * a `mem=` need above MAX_MIG_MEM (when set: the largest MIG slice of the partition)
    is rejected at submission and at a user's update: such a job could never run;
  * a job that asks for GRES or TRES of its own (--gres, --gpus, --gpus-per-node,
    --gpus-per-task, --gpus-per-socket, --tres-per-task ...) is rejected: the planner
    gives each job its MIG instance's GRES record, which is what lets Slurm's device
    cgroup open that instance only;
  * a heterogeneous job (sbatch with ':' or '#SBATCH hetjob') is rejected: the planner
    gives each job one MIG slice (job arrays are fine: each task is planned as a job of
    its own, known to the planner and the hooks as <array id>_<task>);
  * a job that would run as root is rejected (ALLOW_ROOT_JOBS): root can leave its
    device cgroup and open every instance;
  * a job name or comment that is not UTF-8 is rejected (the planner reads them as
    UTF-8), and so is a job on more than one node (-N 2, -N 1-2: a MIG slice is on one);
  * the job is held (priority 0) so that the slurm-mig planner decides where and when
    it runs. Slurm records this as a *user* hold (JobHeldUser); slurm_job_modify
    refuses a release (`scontrol release`, which sets the priority) of a MIG job by
    anyone but the planner, so the owner cannot lift it and the planner need not
    turn it into an admin hold (which would cost one Slurm write per job).
In every other partition (except those of NON_MIG_PARTITIONS), for jobs of users (not
PLANNER_UIDS):
  * a GPU GRES or TRES (--gres=gpu..., --gpus*, --tres-per-task, in any field Slurm
    reads them from) is rejected unless its type is one of OTHER_GPU_TYPES: on a MIG
    node every gpu record is a MIG instance's (slurm-mig gres-conf), and Slurm matches a
    requested type by a 32-bit sum of its bytes, so "60g37" gets record m0g3; no pattern
    of names is safe, only an exact list of the site's other types;
  * --exclusive is rejected: a whole-node job gets every GRES record of the node, every
    MIG instance's devices with them (22.05 through 26.05);
  * `scontrol update` of such a job adding GPU GRES is rejected the same way.
A user cannot move a job out of the MIG partition (`scontrol update Partition=`): a
released job carries its instance's GRES record (TresPerNode) and would run with it,
and without the Prolog's check, elsewhere; a held one could get it in the moment
between the planner's update and the move. (Refusing is simpler to reason about than
clearing its GRES: nothing a user writes can leave a record outside the partition.)
Nor can a user move a job into a partition that may hold MIG nodes from one of
NON_MIG_PARTITIONS (Slurm does not show job_modify whether it was --exclusive).
Every way into the partition is checked at an update too, for every user (the planner
never moves a job nor sets its nodes or nice): a heterogeneous job cannot move into it,
nor a job on more than one node, NumNodes cannot go above 1, and nice cannot change
while the job is held (under priority/basic Slurm sets a held job's priority to 2 on a
nice change, which lifts the hold); a user's new name or comment must be UTF-8, and
the time= of a job the planner has released (or that runs) cannot change.
Other jobs in other partitions pass untouched. slurm_job_modify does the same to an update
of a MIG job's comment (`scontrol update JobId=.. Comment=..`, or a job moved into the
partition) by anyone but the planner (PLANNER_UIDS): tokens are removed, so a user
cannot write back an older token of their job, and a malformed hint or an over-long
comment is rejected (Slurm 22.05 does not pass the message of a modify rejection to
the user; slurmctld's log has it; 23.02 and later do).

Keep the grammar and the messages identical to slurm_mig/hints.py; the tests
(tests/e2e/test_job_submit.py) feed both the same cases.
--]]

local MIG_PARTITION = "mig"
-- uids whose comment updates are the planner's (it writes the token): root, and the
-- planner's user if it runs as another Slurm operator
local PLANNER_UIDS = { [0] = true }
-- root's jobs may run in the MIG partition (a test cluster's choice; never on a site)
local ALLOW_ROOT_JOBS = false
-- GRES whose records on a MIG node open MIG instances' devices: gpu (one record per
-- possible instance), and mps and shard, which ride on the same devices; and mig_slice,
-- the count of the node's slices the planner gives (a job elsewhere holding some would
-- keep planned jobs from starting)
local MIG_GRES = { gpu = true, mps = true, shard = true, mig_slice = true }
-- gres.conf types of the site's GPUs that are not MIG nodes' (e.g. { a100 = true }):
-- users may request these outside the MIG partition; matched exactly (one that Slurm
-- would take for a MIG record's type is dropped at load, with an error in the log)
local OTHER_GPU_TYPES = {}
-- partitions without any MIG node (e.g. { a100 = true }): GPU requests and --exclusive
-- there are Slurm's business
local NON_MIG_PARTITIONS = {}
-- bytes of the largest MIG slice of the partition (0: no limit): a job whose mem= hint
-- asks for more can never run and is refused at submission. `slurm-mig site-files`
-- fills it with the largest MIG profile memory of the site's GPU models
-- (slurm_mig.hints.largest_profile_memory); keep it one line of this form.
local MAX_MIG_MEM = 0
-- job_desc.shared of --exclusive (Slurm's JOB_SHARED_NONE): a whole-node allocation
local EXCLUSIVE = 0
-- how much of a user's request a message quotes
local MAX_QUOTE = 80
-- bytes of a user's TRES value that are read (a longer one is refused): bounds the work
local MAX_TRES = 1024
-- = slurm_mig.hints.MAX_USER_COMMENT
local MAX_COMMENT = 512
-- a job_desc priority that an update leaves unset (Slurm's NO_VAL)
local NO_VAL = 4294967294
local RELEASE_REFUSED = "slurm-mig: jobs of the MIG partition are released by the "
	.. "slurm-mig planner when their slices are free; 'slurm-mig explain JOB' says when "
	.. "(scancel the job to withdraw it)"

local HETJOB_REFUSED = "slurm-mig: heterogeneous jobs cannot run in the " .. MIG_PARTITION
	.. " partition (the planner gives each job one MIG slice); submit each component as "
	.. "a job of its own (sbatch without ':' or '#SBATCH hetjob')"

local HETJOB_MOVED = "slurm-mig: a heterogeneous job cannot move to the " .. MIG_PARTITION
	.. " partition (the planner gives each job one MIG slice); scancel it and submit each "
	.. "component to " .. MIG_PARTITION .. " as a job of its own"
local NICE_REFUSED = "slurm-mig: nice cannot change while the slurm-mig planner holds the job "
	.. "(Slurm would lift its hold); scancel it and submit it again with --nice=N"

local PREFIX = "mig:"
local KEYS = "key, mem, iters, time, pcie, alpha, restartable, deadline, tasks"
local MAX_SIZE = 2 ^ 50 -- bytes (1 PiB)
local MAX_DURATION = 366 * 86400 -- seconds
local MAX_ITERS = 1000000000
local MAX_TASKS = 8 -- instances of a job of several slices (geometry.MAX_TASKS)
local MAX_PCIE = 1000 -- GB/s
local MAX_ALPHA = 100
local MAX_WORD = 256 -- bytes of the mig: word
local SIZE_FIX = "write bytes or a size like 12G or 512MiB"
local TIME_FIX = "write seconds or a time like 90s, 15m, 2h or 1:30:00"
local DEADLINE_FIX = "write a time after submission like 2h or 1:30:00, or a UTC date like 2027-01-31T18:00"
local SIZE_UNITS = {
	[""] = 0, b = 0,
	k = 1, kb = 1, kib = 1,
	m = 2, mb = 2, mib = 2,
	g = 3, gb = 3, gib = 3,
	t = 4, tb = 4, tib = 4,
}
local TIME_UNITS = { [""] = 1, s = 1, m = 60, h = 3600, d = 86400 }
local TOKEN_PREFIX = "migplan=" -- the planner's word: skipped when reading the hint
local MIN_PLAIN_BYTES = 2 ^ 20 -- below it a size without a unit is surely not bytes
-- unit words that may follow a bare number by mistake (`time=2 hours`): the unit meant
local TIME_WORDS = {
	s = "s", sec = "s", secs = "s", second = "s", seconds = "s",
	m = "m", min = "m", mins = "m", minute = "m", minutes = "m",
	h = "h", hr = "h", hrs = "h", hour = "h", hours = "h",
	d = "d", day = "d", days = "d",
}

local function q(text)
	return "'" .. text .. "'"
end

-- q(text), at most MAX_QUOTE bytes of it (for a user's text in a message)
local function quote(text)
	if #text > MAX_QUOTE then
		text = text:sub(1, MAX_QUOTE) .. "..."
	end
	return q(text)
end

-- "12" or "12.5" (finite); nil otherwise
local function decimal(text)
	if text:match("^%d+$") or text:match("^%d+%.%d+$") then
		local x = tonumber(text)
		if x ~= math.huge then
			return x
		end
	end
	return nil
end

-- Each check returns nil when the value is fine, else "problem; fix".
local function check_size(text)
	local number, unit = text:match("^(%d+)(%a*)$")
	if not number then
		number, unit = text:match("^(%d+%.%d+)(%a*)$")
	end
	if not number then
		return q(text) .. " is not a size; " .. SIZE_FIX
	end
	local exponent = SIZE_UNITS[unit:lower()]
	if exponent == nil then
		return "unknown unit " .. q(unit) .. "; " .. SIZE_FIX
	end
	if exponent == 0 and number:find(".", 1, true) then
		return q(text) .. " is not a whole number of bytes; " .. SIZE_FIX
	end
	local raw = tonumber(number) * 1024 ^ exponent
	if raw > MAX_SIZE then
		return q(text) .. " is more than 1 PiB; " .. SIZE_FIX
	end
	local value = math.floor(raw + 0.5)
	if value <= 0 then
		return q(text) .. " is not above 0; " .. SIZE_FIX
	end
	return nil, value, unit
end

-- bytes in GiB, one decimal, rounded down ("39.6G", "40G"): = hints.size_text
local function size_text(n)
	local tenths = math.floor(n * 10 / 2 ^ 30)
	local whole, tenth = math.floor(tenths / 10), tenths % 10
	if tenth == 0 then
		return string.format("%dG", whole)
	end
	return string.format("%d.%dG", whole, tenth)
end

-- a mem= hint: a size; plain bytes at least 1 MiB; at most MAX_MIG_MEM (when set and
-- `limit`: at submission and a user's update)
local function check_mem(text, at_submit, limit)
	local problem, value, unit = check_size(text)
	if problem then
		return problem
	end
	if unit == "" and value < MIN_PLAIN_BYTES then
		return q(text) .. " is " .. string.format("%d", value) .. " bytes; write " .. text ..
			"G or " .. text .. "MiB"
	end
	if limit and MAX_MIG_MEM > 0 and value > MAX_MIG_MEM then
		local most = size_text(MAX_MIG_MEM)
		return q(text) .. " exceeds the largest MIG slice of this partition (" .. most ..
			"); ask for at most " .. most
	end
	return nil
end

local function check_duration(text)
	local seconds
	local number, unit = text:match("^(%d+)([smhd]?)$")
	if not number then
		number, unit = text:match("^(%d+%.%d+)([smhd]?)$")
	end
	if number then
		seconds = tonumber(number) * TIME_UNITS[unit]
	else
		local h, m, s = text:match("^(%d+):(%d%d?):(%d%d?)$")
		local has_hours = h ~= nil
		if not has_hours then
			m, s = text:match("^(%d%d?):(%d%d?)$")
		end
		if not m then
			return q(text) .. " is not a duration; " .. TIME_FIX
		end
		h, m, s = tonumber(h or "0"), tonumber(m), tonumber(s)
		if s >= 60 or (has_hours and m >= 60) then
			return q(text) .. ": minutes and seconds must be below 60; " .. TIME_FIX
		end
		seconds = h * 3600 + m * 60 + s
	end
	if seconds > MAX_DURATION then
		return q(text) .. " is more than 366 days; " .. TIME_FIX
	end
	if seconds <= 0 then
		return q(text) .. " is not above 0; " .. TIME_FIX
	end
	return nil
end

-- Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
local function days_from_civil(y, m, d)
	if m <= 2 then
		y = y - 1
	end
	local era = math.floor(y / 400)
	local yoe = y - era * 400
	local mp = (m + 9) % 12
	local doy = math.floor((153 * mp + 2) / 5) + d - 1
	local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
	return era * 146097 + doe - 719468
end

local function days_in_month(y, m)
	local days = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 }
	if m == 2 and (y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0)) then
		return 29
	end
	return days[m]
end

-- A duration after submission (the time grammar) or a UTC date, not in the past at
-- submission (later, a deadline that has passed is the job's business, not an error).
local function check_deadline(text, at_submit)
	if not text:find("-", 1, true) then
		if text:match("^%d+[smhd]?$") or text:match("^%d+%.%d+[smhd]?$")
			or text:match("^%d+:%d%d?:%d%d?$") or text:match("^%d%d?:%d%d?$") then
			return check_duration(text)
		end
		return q(text) .. " is not a deadline; " .. DEADLINE_FIX
	end
	local y, mo, d, h, mi, rest = text:match("^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d)(.*)$")
	local sec = "0"
	if y and rest ~= "" and rest ~= "Z" then
		sec = rest:match("^:(%d%d)Z?$")
		if not sec then
			y = nil
		end
	end
	if not y then
		return q(text) .. " is not a deadline; " .. DEADLINE_FIX
	end
	y, mo, d, h, mi, sec = tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi), tonumber(sec)
	if y < 2000 or y > 2199 then
		return q(text) .. ": the year must be 2000 to 2199; " .. DEADLINE_FIX
	end
	if mo < 1 or mo > 12 or d < 1 or d > days_in_month(y, mo) then
		return q(text) .. " is not a date of the calendar; " .. DEADLINE_FIX
	end
	if h >= 24 or mi >= 60 or sec >= 60 then
		return q(text) .. ": hours must be below 24, minutes and seconds below 60; " .. DEADLINE_FIX
	end
	local at = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec
	if at_submit and at <= os.time() then
		return q(text) .. " is in the past (UTC); " .. DEADLINE_FIX
	end
	return nil
end

local CHECKS = {
	key = function(v)
		if #v > 64 or not v:match("^[%w_%.%-]+$") then
			return q(v) .. " is not a job kind; use 1 to 64 letters, digits, '_', '.' or '-'"
		end
	end,
	mem = check_mem,
	iters = function(v)
		if not v:match("^%d+$") or tonumber(v) <= 0 then
			return q(v) .. " is not a whole number above 0; write e.g. iters=1000"
		end
		if tonumber(v) > MAX_ITERS then
			return q(v) .. " is more than " .. MAX_ITERS .. " iterations; write e.g. iters=1000"
		end
	end,
	time = check_duration,
	pcie = function(v)
		local x = decimal(v)
		if x == nil then
			return q(v) .. " is not a bandwidth in GB/s; write a number >= 0, e.g. pcie=12.5"
		end
		if x > MAX_PCIE then
			return q(v) .. " is more than " .. MAX_PCIE .. " GB/s; write e.g. pcie=12.5"
		end
	end,
	alpha = function(v)
		local x = decimal(v)
		if x == nil or x <= 0 then
			return q(v) .. " is not a number above 0; write e.g. alpha=0.9"
		end
		if x > MAX_ALPHA then
			return q(v) .. " is more than " .. MAX_ALPHA .. "; write e.g. alpha=0.9"
		end
	end,
	restartable = function(v)
		if v ~= "yes" and v ~= "no" then
			return q(v) .. " is not yes or no; write restartable=yes or restartable=no"
		end
	end,
	deadline = check_deadline,
	tasks = function(v)
		local fix = "write a whole number from 1 to " .. MAX_TASKS .. ", e.g. tasks=4"
		if not v:match("^%d+$") or tonumber(v) < 1 then
			return q(v) .. " is not a whole number of tasks; " .. fix
		end
		if tonumber(v) > MAX_TASKS then
			return q(v) .. " is more than " .. MAX_TASKS .. " tasks (one MIG slice each); " .. fix
		end
	end,
}

local function fail(shown, problem)
	return "slurm-mig: hint " .. q(shown) .. ": " .. problem
end

-- "a space inside the mig: word" (shown: the words as written, joined: the fix)
local function spaced(shown, joined)
	return fail(shown, "a space inside the mig: word; write " .. joined)
end

-- The message for `time=2 hours` (a bare number, then a unit word), or nil.
local function unit_word(key, value, after)
	if after == nil or (key ~= "time" and key ~= "deadline" and key ~= "mem") then
		return nil
	end
	if not (value:match("^%d+$") or value:match("^%d+%.%d+$")) then
		return nil
	end
	local word = after:match("^(%a+)[%.,;:!%?%)]*$")
	if word == nil then
		return nil
	end
	local unit
	if key == "mem" then
		local lower = word:lower()
		if lower ~= "" and lower ~= "b" and SIZE_UNITS[lower] ~= nil then
			unit = word
		end
	else
		unit = TIME_WORDS[word:lower()]
	end
	if unit == nil then
		return nil
	end
	return fail(key .. "=" .. value, "followed by " .. q(after) ..
		": the unit must be part of the value; write " .. key .. "=" .. value .. unit)
end

-- nil when the comment's mig: hint is well formed (or absent), else the message.
-- `at_submit`: a deadline date must not be past; `limit`: mem= at most MAX_MIG_MEM.
local function check_comment(comment, at_submit, limit)
	if comment == nil then
		return nil
	end
	local word, after1, after2
	local taken = 0 -- words after the mig: word kept (at most two)
	for w in comment:gmatch("%S+") do
		if w:sub(1, #TOKEN_PREFIX) == TOKEN_PREFIX then
			-- the planner's token: skipped
		elseif w:sub(1, #PREFIX):lower() == PREFIX then
			if w:sub(1, #PREFIX) ~= PREFIX then
				return fail(w, "write the prefix in lower case: " .. PREFIX .. w:sub(#PREFIX + 1))
			end
			if word ~= nil then
				return fail(w, "a second mig: word; put all settings in one mig: word, separated by commas")
			end
			word = w
		elseif word ~= nil and taken < 2 then
			taken = taken + 1
			if taken == 1 then
				after1 = w
			else
				after2 = w
			end
		end
	end
	if word == nil then
		return nil
	end
	if #word > MAX_WORD then
		return fail("mig:...", #word .. " characters, more than " .. MAX_WORD .. "; shorten the mig: word")
	end
	local body = word:sub(#PREFIX + 1)
	if body == "" then
		if after1 then
			return spaced(word .. " " .. after1, word .. after1)
		end
		return fail(word, "no settings; write mig:key=value,... e.g. mig:mem=12G,time=2h")
	end
	local seen = {}
	local start = 1
	while true do
		local comma = body:find(",", start, true)
		local item = body:sub(start, (comma or 0) - 1)
		-- the words after the hint word follow the last setting only
		local next1, next2 = nil, nil
		if not comma then
			next1, next2 = after1, after2
		end
		if item == "" then
			if next1 then
				return spaced(word .. " " .. next1, word .. next1)
			end
			return fail(word, "an empty setting (two commas in a row, or one at an end); separate settings with single commas")
		end
		local eq = item:find("=", 1, true)
		if not eq then
			if next1 == "=" and next2 then
				return spaced(item .. " = " .. next2, word .. "=" .. next2)
			end
			if next1 and next1:sub(1, 1) == "=" and next1 ~= "=" then
				return spaced(item .. " " .. next1, word .. next1)
			end
			return fail(item, "no '='; write " .. item .. "=value")
		end
		local key, value = item:sub(1, eq - 1), item:sub(eq + 1)
		if CHECKS[key] == nil then
			return fail(item, "unknown key " .. q(key) .. "; use one of " .. KEYS)
		end
		if seen[key] then
			return fail(item, q(key) .. " is given twice; give each key once")
		end
		seen[key] = true
		if value == "" then
			if next1 then
				return spaced(item .. " " .. next1, word .. next1)
			end
			return fail(item, "no value; write " .. key .. "=value")
		end
		local problem = unit_word(key, value, next1)
		if problem then
			return problem
		end
		problem = CHECKS[key](value, at_submit, limit)
		if problem then
			return fail(item, problem)
		end
		if not comma then
			return nil
		end
		start = comma + 1
	end
end

-- The value of the `time=` setting of the comment's mig: word ("" when none).
local function hint_time(comment)
	for w in (comment or ""):gmatch("%S+") do
		if w:sub(1, #PREFIX) == PREFIX then
			for setting in w:sub(#PREFIX + 1):gmatch("[^,]+") do
				local key, value = setting:match("^([^=]*)=(.*)$")
				if key == "time" then
					return value
				end
			end
		end
	end
	return ""
end

-- nil unless a user changes the time= hint of a job the planner has released (or that
-- runs): it was planned with that time, and judging its run against a time= raised
-- afterwards would hide an overrun (issue 34, hole 3); mem= may still change (mig-run
-- writes the need it measured before it requeues the job).
local function check_time_change(comment, job_rec)
	if comment == nil or job_rec.priority == 0 then
		return nil
	end
	local before = hint_time(job_rec.comment)
	if hint_time(comment) == before then
		return nil
	end
	return "slurm-mig: time= cannot change once the planner has released the job (it was " ..
		"planned with time=" .. (before == "" and "none" or before) .. "); a job that " ..
		"runs longer is planned from what it ran next time"
end

-- The comment without planner tokens.
local function strip_tokens(comment)
	local rest = (" " .. comment):gsub("%smigplan=%S*", "")
	return rest:match("^%s*(.-)%s*$")
end

-- nil when the comment fits, else the message (= hints.comment_problem).
local function check_length(comment)
	if comment ~= nil and #comment > MAX_COMMENT then
		return "slurm-mig: the comment has " .. #comment .. " characters, more than " .. MAX_COMMENT ..
			" in the " .. MIG_PARTITION .. " partition (Slurm keeps 1024; the rest is for the planner's " ..
			"token and notes); shorten it"
	end
	return nil
end

-- The user's comment without tokens, or the message why it is refused (a user's:
-- mem= at most MAX_MIG_MEM).
local function user_comment(comment, at_submit)
	if comment == nil then
		return nil, nil
	end
	local clean = strip_tokens(comment)
	local problem = check_length(clean) or check_comment(clean, at_submit, true)
	return clean, problem
end

-- "yes" (the MIG partition alone), "mixed" (with others) or nil (not MIG).
local function mig_partition(partitions)
	if partitions == nil then
		return nil
	end
	local found, others = false, false
	for p in partitions:gmatch("[^,]+") do
		if p == MIG_PARTITION then
			found = true
		else
			others = true
		end
	end
	if not found then
		return nil
	end
	return others and "mixed" or "yes"
end

-- The GRES/TRES options of a job description (set by --gres, --gpus*, --tres-per-task).
local TRES_FIELDS = { "tres_per_job", "tres_per_node", "tres_per_socket", "tres_per_task" }

-- The first term of a TRES value ("gres:gpu:m0g3:1", "gres/gpu=1", "gres/gpu:a100:2";
-- 22.05 writes gres:, 24.11 and later gres/) that asks for a MIG GRES, or nil. Slurm
-- reads the GRES name after the first "gres:" (22.05) or "gres" (24.11 and later) of a
-- term, wherever it is; here a term asks for one if a MIG GRES name, whatever its case,
-- follows its start or any "gres" in it (":" or "/" optional), unless with a type of
-- OTHER_GPU_TYPES.
local function mig_gres_term(value)
	for term in value:gmatch("[^,]+") do
		local lower = term:lower()
		local at = 1
		while at do
			local name, more = term:sub(at):match("^([^:=]*)(.*)$")
			if MIG_GRES[name:lower():match("^%s*(.-)%s*$")] then
				local gres_type = more:match("^:([^:=]+)")
				if not (gres_type and OTHER_GPU_TYPES[gres_type]) then
					return term
				end
			end
			local _, last = lower:find("gres[:/]?", at)
			at = last and last + 1
		end
	end
	return nil
end

-- nil when each TRES value of `fields` is at most MAX_TRES bytes, else the message.
local function check_tres_length(fields)
	for _, name in ipairs(TRES_FIELDS) do
		local value = fields[name]
		if value ~= nil and #value > MAX_TRES then
			return "slurm-mig: " .. name .. " has " .. #value .. " bytes, more than " .. MAX_TRES ..
				"; shorten the job's --gres/--gpus/--tres-per-* options"
		end
	end
	return nil
end

-- nil when the job asks for no GRES or TRES of its own, else the message.
local function check_tres(job_desc)
	local long = check_tres_length(job_desc)
	if long then
		return long
	end
	for _, name in ipairs(TRES_FIELDS) do
		local value = job_desc[name]
		if value ~= nil and (value:lower():find("gres", 1, true) or mig_gres_term(value)) then
			return "slurm-mig: the " .. MIG_PARTITION .. " partition gives each job its MIG slice " ..
				"itself; remove --gres/--gpus (" .. quote(value) .. ") and say what the job needs in a " ..
				"mig: hint, e.g. --comment=mig:mem=12G"
		end
	end
	return nil
end

-- True when every partition of a (comma-separated) list is one of NON_MIG_PARTITIONS.
local function non_mig(partitions)
	if partitions == nil or partitions == "" then
		return false
	end
	for p in partitions:gmatch("[^,]+") do
		if not NON_MIG_PARTITIONS[p] then
			return false
		end
	end
	return true
end

-- nil when a user's job in `partition` (not the MIG partition) can reach no MIG
-- instance, else the message: `fields` holds its TRES values (job_desc's, or what an
-- update leaves), `shared` its --exclusive (nil where unknown).
local function check_outside(fields, shared, partition)
	if non_mig(partition) then
		return nil
	end
	local long = check_tres_length(fields)
	if long then
		return long
	end
	local where = " in partition " .. quote(partition or "(default)")
	for _, name in ipairs(TRES_FIELDS) do
		local value = fields[name]
		local term = value ~= nil and mig_gres_term(value)
		if term then
			return "slurm-mig: a MIG node's GPUs are its MIG slices, which the " .. MIG_PARTITION ..
				" partition alone hands out (" .. quote(term) .. where .. "); submit to " ..
				MIG_PARTITION .. " without --gres/--gpus and let the planner choose the slice " ..
				"(say what the job needs in a mig: hint, e.g. --comment=mig:mem=12G)"
		end
	end
	if shared == EXCLUSIVE then
		return "slurm-mig: --exclusive" .. where .. " would give the job every MIG slice of " ..
			"its node; remove --exclusive (for a GPU, submit to " .. MIG_PARTITION ..
			" and let the planner choose the slice)"
	end
	return nil
end

-- nil unless the job asks for a whole node in the MIG partition, else the message.
local function check_exclusive(shared)
	if shared == EXCLUSIVE then
		return "slurm-mig: the " .. MIG_PARTITION .. " partition shares each node between " ..
			"MIG slices (a whole node would give the job every slice); remove --exclusive"
	end
	return nil
end

-- The position of the first byte of `text` that is not well-formed UTF-8 (RFC 3629:
-- what the planner's strict decoder takes), or nil.
local function bad_utf8(text)
	local i, n = 1, #text
	while i <= n do
		local c = text:byte(i)
		local more, lo, hi = 0, 0x80, 0xBF
		if c >= 0xC2 and c <= 0xDF then
			more = 1
		elseif c >= 0xE0 and c <= 0xEF then
			more = 2
			if c == 0xE0 then
				lo = 0xA0
			elseif c == 0xED then
				hi = 0x9F
			end
		elseif c >= 0xF0 and c <= 0xF4 then
			more = 3
			if c == 0xF0 then
				lo = 0x90
			elseif c == 0xF4 then
				hi = 0x8F
			end
		elseif c >= 0x80 then
			return i
		end
		for k = 1, more do
			local b = text:byte(i + k)
			if b == nil or b < lo or b > hi then
				return i
			end
			lo, hi = 0x80, 0xBF
		end
		i = i + more + 1
	end
	return nil
end

-- nil when the job's name and comment (nil: not given) are UTF-8, else the message
-- naming the field: one byte that is not stopped every plan of the partition.
local function check_utf8(name, comment, how)
	for _, field in ipairs({ { "job name", name, how[1] }, { "comment", comment, how[2] } }) do
		local at = field[2] and bad_utf8(field[2])
		if at then
			return "slurm-mig: the " .. field[1] .. " is not UTF-8 (byte " .. at .. " is 0x" ..
				string.format("%02x", field[2]:byte(at)) .. "); write it in UTF-8 (" .. field[3] .. ")"
		end
	end
	return nil
end

-- True for a node count a job gives that is more than one (nil, 0 and NO_VAL: unset).
local function many(n)
	return n ~= nil and n ~= NO_VAL and n > 1
end

-- nil unless the job asks for more than one node, else the message (`fix`: what to do).
local function check_nodes(min_nodes, max_nodes, fix)
	if many(min_nodes) or many(max_nodes) then
		return "slurm-mig: a job of the " .. MIG_PARTITION .. " partition runs on one node " ..
			"(the planner gives each job one MIG slice); " .. fix
	end
	return nil
end

-- nil when an update leaves a job of the MIG partition one the planner can plan (not
-- heterogeneous, on one node, its hold in place), else the message; for every user,
-- the planner's included (it never moves a job nor sets its nodes or nice).
local function check_update_shape(job_desc, job_rec)
	local moved = job_desc.partition ~= nil and job_desc.partition ~= job_rec.partition
	local het = job_rec.het_job_id
	if moved and het ~= nil and het ~= 0 and het ~= NO_VAL then
		return HETJOB_MOVED
	end
	local fix = "leave NumNodes at 1 (or scancel it and submit one job per node)"
	local problem = check_nodes(job_desc.min_nodes, job_desc.max_nodes, fix)
	if problem == nil and moved then
		problem = check_nodes(job_rec.min_nodes, job_rec.max_nodes, fix)
	end
	if problem == nil and job_desc.nice ~= nil and job_desc.nice ~= NO_VAL and job_rec.priority == 0 then
		-- under priority/basic Slurm sets a held job's priority to at least 2 on nice
		problem = NICE_REFUSED
	end
	return problem
end

-- The job's user: the job's own uid, else who submits it.
local function job_uid(job_desc, submit_uid)
	if job_desc.user_id ~= nil and job_desc.user_id ~= NO_VAL then
		return job_desc.user_id
	end
	return submit_uid
end

local function requested_partition(job_desc, part_list)
	if job_desc.partition ~= nil then
		return job_desc.partition
	end
	for _, part in pairs(part_list) do
		if part.flag_default == 1 then
			return part.name
		end
	end
	return nil
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	local partition = requested_partition(job_desc, part_list)
	local mig = mig_partition(partition)
	if mig == nil then
		local problem = nil
		if not PLANNER_UIDS[job_uid(job_desc, submit_uid)] then
			problem = check_outside(job_desc, job_desc.shared, partition)
		end
		if problem then
			slurm.log_user("%s", problem)
			return slurm.ERROR
		end
		return slurm.SUCCESS
	end
	if mig == "mixed" then
		slurm.log_user("%s", "slurm-mig: the " .. MIG_PARTITION .. " partition cannot be combined with others (" ..
			partition .. "); submit to " .. MIG_PARTITION .. " alone")
		return slurm.ERROR
	end
	-- slurmctld calls this once per component of a heterogeneous job, with its offset
	if job_desc.het_job_offset ~= nil and job_desc.het_job_offset ~= NO_VAL then
		slurm.log_user("%s", HETJOB_REFUSED)
		return slurm.ERROR
	end
	if (job_desc.user_id == 0 or submit_uid == 0 and job_desc.user_id == nil) and not ALLOW_ROOT_JOBS then
		slurm.log_user("%s", "slurm-mig: jobs of root cannot run in the " .. MIG_PARTITION ..
			" partition (root can leave the device cgroup that keeps each job on its slice); " ..
			"submit as another user")
		return slurm.ERROR
	end
	local problem = check_utf8(job_desc.name, job_desc.comment, { "--job-name", "--comment" })
		or check_nodes(job_desc.min_nodes, job_desc.max_nodes, "remove -N/--nodes (or submit one job per node)")
	local clean
	if problem == nil then
		clean, problem = user_comment(job_desc.comment, true)
	end
	problem = problem or check_tres(job_desc) or check_exclusive(job_desc.shared)
	if problem then
		slurm.log_user("%s", problem)
		return slurm.ERROR
	end
	if clean ~= nil then
		job_desc.comment = clean
	end
	job_desc.priority = 0
	return slurm.SUCCESS
end

-- The job's TRES values after an update: job_desc's, and job_rec's where the update
-- moves the job to another partition and leaves them (a moved job keeps its GRES).
local function tres_after(job_desc, job_rec)
	local moved = job_desc.partition ~= nil and job_desc.partition ~= job_rec.partition
	local out = {}
	for _, name in ipairs(TRES_FIELDS) do
		local value = job_desc[name]
		if value == nil and moved then
			value = job_rec[name]
		end
		out[name] = value
	end
	return out
end

-- nil when a user may move the job from partition `from` to `to`, else the message.
local function check_move(from, to)
	if to == nil or to == from then
		return nil
	end
	if mig_partition(from) ~= nil and mig_partition(to) ~= "yes" then
		return "slurm-mig: a job of the " .. MIG_PARTITION .. " partition stays there (its " ..
			"MIG slice's GRES record would go with it); scancel it and submit it again to " .. quote(to)
	end
	if mig_partition(to) == "mixed" then
		return "slurm-mig: the " .. MIG_PARTITION .. " partition cannot be combined with others (" ..
			quote(to) .. "); move the job to " .. MIG_PARTITION .. " alone"
	end
	if non_mig(from) and not non_mig(to) then
		return "slurm-mig: a job of " .. quote(from) .. " cannot move to " .. quote(to) ..
			", which may hold MIG nodes (its --exclusive or GRES would reach their slices); " ..
			"scancel it and submit it again there"
	end
	return nil
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	local user = not PLANNER_UIDS[modify_uid]
	local target = job_desc.partition or job_rec.partition
	if user then
		local problem = check_move(job_rec.partition, job_desc.partition)
		if problem == nil and mig_partition(target) == nil then
			problem = check_outside(tres_after(job_desc, job_rec), job_desc.shared, target)
		end
		if problem then
			slurm.log_user("%s", problem)
			return slurm.ERROR
		end
	end
	if mig_partition(target) == nil then
		return slurm.SUCCESS
	end
	local shape = check_update_shape(job_desc, job_rec)
	if shape then
		slurm.log_user("%s", shape)
		return slurm.ERROR
	end
	local comment, name = job_desc.comment, job_desc.name
	if job_desc.partition ~= nil then -- a job moved into the MIG partition keeps them
		comment = comment or job_rec.comment
		name = name or job_rec.name
	end
	if not user then
		local problem = check_comment(comment, false)
		if problem then
			slurm.log_user("%s", problem)
			return slurm.ERROR
		end
		return slurm.SUCCESS
	end
	-- `scontrol release` sets the priority (INFINITE), `scontrol hold` sets 0 (a user
	-- may hold their own job); other updates leave it unset
	local priority = job_desc.priority
	if priority ~= nil and priority ~= NO_VAL and priority ~= 0 then
		slurm.log_user("%s", RELEASE_REFUSED)
		return slurm.ERROR
	end
	local problem = check_utf8(name, comment, { "scontrol update JobName=", "scontrol update Comment=" })
	local clean
	if problem == nil then
		clean, problem = user_comment(comment, false)
	end
	problem = problem or check_time_change(job_desc.comment, job_rec)
		or check_tres(tres_after(job_desc, job_rec)) or check_exclusive(job_desc.shared)
	if problem then
		slurm.log_user("%s", problem)
		return slurm.ERROR
	end
	if clean ~= nil and clean ~= comment then
		job_desc.comment = clean -- the user wrote a token: only the planner does
	end
	return slurm.SUCCESS
end

-- Slurm's id of a GRES type (gres_build_id): the sum of its bytes (C chars, signed)
-- shifted left by 0, 8, 16, 24, 0, ... bits, modulo 2^32. Slurm matches types by it.
local function slurm_id(name)
	local id, shift = 0, 0
	for i = 1, #name do
		local byte = name:byte(i)
		if byte >= 128 then
			byte = byte - 256
		end
		id = (id + byte * 2 ^ shift) % 2 ^ 32
		shift = (shift + 8) % 32
	end
	return id
end

-- OTHER_GPU_TYPES without those Slurm would match to a MIG record (m<N>g<g>, N and g
-- below 64) on a node
local function drop_mig_aliases()
	local mig_ids = {}
	for gpu = 0, 63 do
		for gi = 0, 63 do
			mig_ids[slurm_id("m" .. gpu .. "g" .. gi)] = true
		end
	end
	for name in pairs(OTHER_GPU_TYPES) do
		if mig_ids[slurm_id(name)] then
			slurm.log_error("slurm-mig: OTHER_GPU_TYPES: Slurm takes %s for a MIG record's type; "
				.. "it is ignored (rename that type in gres.conf)", q(name))
			OTHER_GPU_TYPES[name] = nil
		end
	end
end

drop_mig_aliases()
slurm.log_info("slurm-mig: job_submit.lua loaded (MIG partition %s)", MIG_PARTITION)
return slurm.SUCCESS
