"""Account APIs over Account.json (username -> password, token, email)."""

from __future__ import annotations

import string

from genenv_jax.domains.api_bank.apis.base import ApiError, register

# ForgotPassword's verification code: every recorded call shows this value.
VERIFICATION_CODE = 970420
_TOKEN_ALPHABET = string.ascii_lowercase + string.digits


def user_for_token(state, token) -> str:
    """The account of `token`, or the recorded 'The token is invalid.' failure."""
    user = state.username_for_token(token)
    if user is None:
        raise ApiError("The token is invalid.")
    return user


@register("GetUserToken", "username:str password:str")
def get_user_token(state, username, password):
    accounts = state.table("Account")
    if username not in accounts:
        raise ApiError("The username does not exist.")
    if accounts[username]["password"] != password:
        raise ApiError("The password is incorrect.")
    return {"token": accounts[username]["token"]}


@register("RegisterUser", "username:str password:str email:str")
def register_user(state, username, password, email):
    accounts = state.table("Account")
    if username in accounts:
        raise ApiError("The username already exists.")
    token = "".join(state.rng.choice(_TOKEN_ALPHABET) for _ in range(32))   # random upstream too
    accounts[username] = {"password": password, "token": token, "email": email}
    return {"token": token}


@register("DeleteAccount", "token:str")
def delete_account(state, token):
    user = state.username_for_token(token)
    if user is None:
        raise ApiError("No such user.")
    del state.table("Account")[user]
    return {"status": "success"}


@register("ModifyPassword", "token:str old_password:str new_password:str")
def modify_password(state, token, old_password, new_password):
    user = user_for_token(state, token)
    account = state.table("Account")[user]
    if account["password"] != old_password:
        raise ApiError("The old password is incorrect.")
    account["password"] = new_password
    return {"status": "success"}


@register("ForgotPassword", "status:str username?:str email?:str verification_code?:int new_password?:str")
def forgot_password(state, status, username=None, email=None, verification_code=None, new_password=None):
    """Two calls: 'Forgot Password' (username, email) returns the code; 'Verification Code' sets the password."""
    accounts = state.table("Account")
    if status == "Forgot Password":
        if not username or not email:
            raise ApiError("The username and email are required for the first call.")
        if username not in accounts:
            raise ApiError("The username does not exist.")
        if accounts[username]["email"] != email:
            raise ApiError("The email is incorrect.")
        state.session["forgot_password_user"] = username
        return VERIFICATION_CODE
    if status == "Verification Code":
        user = state.session.get("forgot_password_user")
        if user is None or user not in accounts:
            raise ApiError("You need to call the API with status \\Forgot Password\\ at first.")
        if verification_code is None or not new_password:
            raise ApiError("The new password and verification code are required for the second call.")
        if verification_code != VERIFICATION_CODE:
            raise ApiError("The verification code is incorrect.")
        accounts[user]["password"] = new_password
        del state.session["forgot_password_user"]
        return "success"
    raise ApiError("The status is only \\Forgot Password\\ or \\Verification Code\\.")
