#!/usr/bin/env bash
# Prepares an offline Iceberg runtime for Spark 3.5, for the Spark end-to-end test.
#
# Maven Central is not reachable where icegate's CI runs, so the runtime comes from PyPI
# (snowpark-connect-deps-iceberg==1.0.3 carries iceberg-spark-runtime-3.5_2.12-1.10.2.jar).
# That jar lacks its relocated Jackson and httpclient5 classes; they are rebuilt here from
# Debian's packages with jarjar under Iceberg's shaded package names. Where Maven Central is
# reachable, `--packages org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.0` replaces all this.
#
# Usage: prepare.sh PYTHON OUT_DIR   (prints nothing on success; OUT_DIR gets two jars)
set -euo pipefail
python="$1"
out="$2"
runtime="$out/iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
deps="$out/iceberg-relocated-deps.jar"
[ -s "$runtime" ] && [ -s "$deps" ] && exit 0
mkdir -p "$out"

java_dir=/usr/share/java
needed=(jarjar.jar jackson-core.jar jackson-databind.jar jackson-annotations.jar httpclient5.jar httpcore5.jar httpcore5-h2.jar)
missing=0
for jar in "${needed[@]}"; do [ -f "$java_dir/$jar" ] || missing=1; done
if [ "$missing" = 1 ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "installing jarjar, Jackson and httpclient5 from Debian's packages" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libjarjar-java libhttpclient5-java \
      libjackson2-core-java libjackson2-databind-java libjackson2-annotations-java >/dev/null
  else
    echo "need Debian packages libjarjar-java libhttpclient5-java libjackson2-{core,databind,annotations}-java (run as root with apt-get)" >&2
    exit 1
  fi
fi
command -v java >/dev/null || { echo "Spark needs Java 17 (apt-get install openjdk-17-jre-headless)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip download --quiet --no-deps -d "$work" snowpark-connect-deps-iceberg==1.0.3
"$python" - "$work" "$runtime.tmp" "$work/merged.jar" "${needed[@]/#/$java_dir/}" <<'PY'
import glob, sys, zipfile
work, runtime_out, merged_out, jarjar, *dep_jars = sys.argv[1:]
wheel = glob.glob(f"{work}/snowpark_connect_deps_iceberg-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    with open(runtime_out, "wb") as f:
        f.write(z.read("snowpark_connect_deps_iceberg/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar"))
seen = set()
with zipfile.ZipFile(merged_out, "w", zipfile.ZIP_DEFLATED) as merged:
    for jar in dep_jars:
        with zipfile.ZipFile(jar) as z:
            for name in z.namelist():
                if name.startswith("META-INF/") or name in seen or name.endswith("/"):
                    continue
                seen.add(name)
                merged.writestr(name, z.read(name))
PY
cat > "$work/rules.txt" <<'RULES'
rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1
rule org.apache.hc.** org.apache.iceberg.shaded.org.apache.hc.@1
RULES
java -jar "$java_dir/jarjar.jar" process "$work/rules.txt" "$work/merged.jar" "$deps.tmp"
mv "$runtime.tmp" "$runtime"
mv "$deps.tmp" "$deps"
