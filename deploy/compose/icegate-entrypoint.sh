#!/bin/sh
# Entrypoint of the icegate service in docker-compose.yml: `icegate "$@"` with a
# secrets.encryption_key (which seals the storage profiles' secret keys in the database).
#
# ICEGATE__SECRETS__ENCRYPTION_KEY, when set and not empty, is used as it is. Otherwise the key is
# the one in $ICEGATE_KEY_FILE (default /var/lib/icegate/encryption-key, in the icegate-data
# volume), generated there on the first start: 32 random bytes in base64. Lose it and the sealed
# keys can no longer be read (`docker compose down -v` removes it together with the database).
set -eu

if [ -z "${ICEGATE__SECRETS__ENCRYPTION_KEY:-}" ]; then
    key_file=${ICEGATE_KEY_FILE:-/var/lib/icegate/encryption-key}
    if [ ! -s "$key_file" ]; then
        (
            umask 077
            head -c 32 /dev/urandom | base64 > "$key_file.new"
            mv "$key_file.new" "$key_file"
        )
        echo "icegate-entrypoint: generated secrets.encryption_key in $key_file" >&2
    fi
    ICEGATE__SECRETS__ENCRYPTION_KEY=$(cat "$key_file")
    export ICEGATE__SECRETS__ENCRYPTION_KEY
fi

exec "${ICEGATE_BIN:-icegate}" "$@"
