#!/bin/sh
# One-shot set-up of docker-compose.yml (service icegate-init): creates the bucket in MinIO and,
# in icegate, an S3 warehouse on it that vends STS credentials. Idempotent: a bucket or warehouse
# that exists is left as it is, so running it again (`docker compose run --rm icegate-init`) only
# waits for icegate and reports.
#
# POSIX sh and curl only (the curlimages/curl image). Every setting has the compose file's value
# as default; values are put into JSON as they are, so they must not contain `"` or `\`.
set -eu

: "${ICEGATE_URL:=http://127.0.0.1:8181}"
: "${ICEGATE_CLIENT_ID:=admin}"
: "${ICEGATE_CLIENT_SECRET:?set ICEGATE_CLIENT_SECRET to the secret of the bootstrap admin}"
# The S3 endpoint is used by icegate itself (probe, metadata files, STS AssumeRole) and handed to
# clients, so it must be one that both reach: see docker-compose.yml.
: "${S3_ENDPOINT:=http://127.0.0.1:9000}"
: "${S3_REGION:=us-east-1}"
: "${S3_ACCESS_KEY_ID:=minioadmin}"
: "${S3_SECRET_ACCESS_KEY:=minioadmin}"
: "${S3_BUCKET:=warehouse}"
# MinIO's AssumeRole ignores the role for its root user; the vended credentials are the root
# user's rights narrowed by icegate's per-table session policy.
: "${STS_ROLE_ARN:=arn:aws:iam::000000000000:role/icegate}"
: "${WAREHOUSE:=lake}"
: "${WAREHOUSE_ROOT:=s3://$S3_BUCKET/$WAREHOUSE}"
: "${WAIT_SECONDS:=180}"

log() { printf 'icegate-init: %s\n' "$*" >&2; }
fail() { log "$*"; exit 1; }

# request METHOD URL [CURL ARGS...]: sets $status (000 when nothing answered) and $body.
request() {
    method=$1 url=$2
    shift 2
    out=$(curl -sS -X "$method" -w '\n%{http_code}' "$@" "$url") || out="$(printf '\n000')"
    status=$(printf '%s\n' "$out" | tail -n 1)
    body=$(printf '%s\n' "$out" | sed '$d')
}

# wait_for URL WHAT: until URL answers 200 (icegate's /ready: its database answers too).
wait_for() {
    deadline=$(( $(date +%s) + WAIT_SECONDS ))
    until curl -fsS -o /dev/null "$1" 2>/dev/null; do
        [ "$(date +%s)" -lt "$deadline" ] || fail "$2 did not become ready at $1 within ${WAIT_SECONDS}s"
        sleep 2
    done
}

wait_for "$ICEGATE_URL/ready" icegate

# The bucket, with a SigV4-signed CreateBucket (no MinIO client needed); the payload hash is
# signed explicitly (an empty body's), as S3 expects and older curl does not add by itself.
# 409 means it exists (MinIO); AWS and moto answer 200 to its owner.
EMPTY_SHA256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
deadline=$(( $(date +%s) + WAIT_SECONDS ))
while :; do
    request PUT "$S3_ENDPOINT/$S3_BUCKET" -H "x-amz-content-sha256: $EMPTY_SHA256" \
        --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_ACCESS_KEY_ID:$S3_SECRET_ACCESS_KEY"
    case $status in
        200) log "created bucket $S3_BUCKET at $S3_ENDPOINT"; break ;;
        409) log "bucket $S3_BUCKET exists at $S3_ENDPOINT"; break ;;
        000 | 5*) [ "$(date +%s)" -lt "$deadline" ] || fail "creating bucket $S3_BUCKET: HTTP $status $body"
                  sleep 2 ;;
        *) fail "creating bucket $S3_BUCKET at $S3_ENDPOINT: HTTP $status $body" ;;
    esac
done

# A token for the bootstrap admin (client credentials grant).
request POST "$ICEGATE_URL/v1/oauth/tokens" \
    --data-urlencode grant_type=client_credentials \
    --data-urlencode "client_id=$ICEGATE_CLIENT_ID" \
    --data-urlencode "client_secret=$ICEGATE_CLIENT_SECRET"
[ "$status" = 200 ] || fail "getting a token for $ICEGATE_CLIENT_ID: HTTP $status $body"
token=$(printf '%s' "$body" | sed -n 's/.*"access_token"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
[ -n "$token" ] || fail "no access_token in the token response"

# The warehouse. icegate checks the profile live before it stores it: it writes, reads and deletes
# a probe object under the root and makes one AssumeRole (a failure is a 400 naming the step).
profile=$(printf '{"type": "s3", "region": "%s", "endpoint": "%s", "path-style-access": true,
  "credentials": {"type": "static", "access-key-id": "%s", "secret-access-key": "%s"},
  "sts": {"role-arn": "%s"}, "vending": "sts"}' \
    "$S3_REGION" "$S3_ENDPOINT" "$S3_ACCESS_KEY_ID" "$S3_SECRET_ACCESS_KEY" "$STS_ROLE_ARN")
request POST "$ICEGATE_URL/management/v1/warehouses" \
    -H "authorization: Bearer $token" -H 'content-type: application/json' \
    --data-binary "{\"name\": \"$WAREHOUSE\", \"storage-root\": \"$WAREHOUSE_ROOT\", \"storage-profile\": $profile}"
case $status in
    201) log "created warehouse $WAREHOUSE at $WAREHOUSE_ROOT (vending STS credentials for $S3_ENDPOINT)" ;;
    409) log "warehouse $WAREHOUSE exists; left as it is" ;;
    *) fail "creating warehouse $WAREHOUSE: HTTP $status $body" ;;
esac

log "ready: catalog $ICEGATE_URL, warehouse $WAREHOUSE, credential $ICEGATE_CLIENT_ID:<secret>"
